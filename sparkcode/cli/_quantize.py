"""Placeholder: this command group is registered by its owning module."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app (none yet)."""
