"""Options that several commands share (``sparkcode``, ``run``, ``acp``): declared once,
so a flag reads and behaves the same everywhere."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

__all__ = [
    "ApiKeyEnvOption",
    "EndpointOption",
    "ModelOption",
    "WorktreeCommand",
    "WorktreeGroup",
    "WorktreeOption",
]

EndpointOption = Annotated[
    str | None,
    typer.Option(
        "--endpoint",
        help="An OpenAI-compatible server at this base URL instead of the managed engine.",
    ),
]
ModelOption = Annotated[
    str | None,
    typer.Option("--model", help="Model name to request (default: the server's first model)."),
]
ApiKeyEnvOption = Annotated[
    str | None,
    typer.Option("--api-key-env", help="Environment variable holding the endpoint's API key."),
]
WORKTREE_HELP = (
    "Work in a git worktree of the workspace's repository on branch "
    "sparkcode/NAME (made from HEAD, or reopened; without NAME a new one); on "
    "exit, how to merge or remove it. Give it after the prompt or as "
    "--worktree=NAME."
)
WorktreeOption = Annotated[
    str | None, typer.Option("--worktree", metavar="[NAME]", help=WORKTREE_HELP)
]
"""``--worktree [NAME]``: its value may be left out (then ``""``: a new name), which
typer's parser cannot say, so the commands that take it are built with
:class:`WorktreeCommand` / :class:`WorktreeGroup`: a bare ``--worktree`` (last, or before
another option) is read as ``--worktree=``."""


def bare_worktree(args: list[str]) -> list[str]:
    """``args`` with a bare ``--worktree`` (the last argument, or one followed by another
    option) written ``--worktree=``; anything after ``--`` is left alone."""
    out = list(args)
    for i, arg in enumerate(out):
        if arg == "--":
            break
        if arg == "--worktree" and (i + 1 == len(out) or out[i + 1].startswith("-")):
            out[i] = "--worktree="
    return out


class WorktreeCommand(TyperCommand):
    """A command whose ``--worktree`` takes an optional NAME."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, bare_worktree(args))


class WorktreeGroup(TyperGroup):
    """The root group (the TUI's options) with ``--worktree`` taking an optional NAME."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, bare_worktree(args))
