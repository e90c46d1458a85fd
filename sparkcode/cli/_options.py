"""Options that several commands share (``sparkcode``, ``run``, ``acp``): declared once,
so a flag reads and behaves the same everywhere."""

from __future__ import annotations

from typing import Annotated

import typer

__all__ = ["ApiKeyEnvOption", "EndpointOption", "ModelOption"]

EndpointOption = Annotated[str | None, typer.Option(
    "--endpoint", help="An OpenAI-compatible server at this base URL instead of the "
    "managed engine.")]
ModelOption = Annotated[str | None, typer.Option(
    "--model", help="Model name to request (default: the server's first model).")]
ApiKeyEnvOption = Annotated[str | None, typer.Option(
    "--api-key-env", help="Environment variable holding the endpoint's API key.")]
