"""Placeholder: ``sparkcode engine patches`` is registered by the scheduler-fix work."""

from __future__ import annotations

import typer


def register(engine_app: typer.Typer) -> None:
    """Add the patches commands to the engine group (none yet)."""
