"""``sparkcode acp``: serve the Agent Client Protocol on stdin/stdout for an editor.

The editor starts this command and owns both pipes; the options choose what
every session talks to, as ``sparkcode run``'s do. Logs and anything a library
or child process prints go to stderr (editors show it as the agent's log).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from typing import Annotated, Any

import typer

from engine.errors import UserError
from engine.paths import Paths

from ._options import ApiKeyEnvOption, EndpointOption, ModelOption


def register(app: typer.Typer) -> None:
    app.command("acp")(acp_cmd)


def acp_cmd(
    profile: Annotated[
        str | None,
        typer.Option(
            "--profile", "-p", help="Engine profile (started at the first session if not running)."
        ),
    ] = None,
    endpoint: EndpointOption = None,
    model: ModelOption = None,
    api_key_env: ApiKeyEnvOption = None,
    vision: Annotated[
        bool,
        typer.Option(
            "--vision", help="With --endpoint: the model takes images (image prompts are offered)."
        ),
    ] = False,
    no_record: Annotated[
        bool,
        typer.Option(
            "--no-record",
            help="Do not record the sessions (session/load then has nothing to load).",
        ),
    ] = False,
    max_turns: Annotated[
        int | None, typer.Option("--max-turns", help="Most model requests for one prompt.")
    ] = None,
    force_tool: Annotated[str | None, typer.Option("--force-tool", hidden=True)] = None,
    force_tool_schema: Annotated[
        str | None, typer.Option("--force-tool-schema", hidden=True)
    ] = None,
    max_tokens: Annotated[int | None, typer.Option("--max-tokens", hidden=True)] = None,
    temperature: Annotated[float | None, typer.Option("--temperature", hidden=True)] = None,
) -> None:
    """Serve ACP v1 on stdin/stdout, for Zed, Neovim, Toad and other editors."""
    from engine.profiles import knobs_from
    from sparkcode.acp import AcpOptions, SparkcodeAcpAgent, protocol_stdout, serve
    from sparkcode.cli._run import FLAGS
    from sparkcode.start import SessionOptions

    if endpoint and profile:
        raise UserError("--endpoint and --profile exclude each other; pass one")
    schema: dict[str, Any] | None = None
    if force_tool_schema is not None:
        try:
            schema = json.loads(force_tool_schema)
        except json.JSONDecodeError as exc:
            raise UserError(f"--force-tool-schema is not JSON: {exc}") from None
    stdout = protocol_stdout()
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.WARNING,
        format="sparkcode acp: %(levelname)s %(name)s: %(message)s",
    )
    options = AcpOptions(
        profile=profile,
        endpoint=endpoint,
        model=model,
        api_key_env=api_key_env,
        vision=vision,
        session=SessionOptions(
            origin="acp",
            record=not no_record,
            force_tool=force_tool,
            force_tool_parameters=schema,
            knobs=knobs_from(
                {"max_turns": max_turns, "max_tokens": max_tokens, "temperature": temperature},
                "sparkcode acp:",
                FLAGS,
            ),
        ),
    )
    agent = SparkcodeAcpAgent(options, Paths.from_env())
    asyncio.run(serve(agent, sys.stdin, stdout))
