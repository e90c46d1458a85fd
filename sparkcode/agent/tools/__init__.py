"""The agent's tools and the registry the loop offers to the model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.errors import UserError

from ._base import (
    EditChecker,
    EditFeedback,
    Preview,
    TodoList,
    Tool,
    ToolContext,
    ToolError,
    ToolKind,
    ToolOutput,
    cap_output,
)
from ._confine import resolve_in_workspace
from ._edits import EditFile, MultiEdit
from ._files import Grep, ListFiles, ReadFile, WriteFile, unified_diff, workspace_listing
from ._git import GitCommit, GitDiff, GitLog, GitStatus
from ._readonly import check_read_only, is_read_only_command
from ._sandbox import BwrapStatus, Sandbox, find_bwrap
from ._shell import Bash
from ._todo import Todo
from ._web import WebFetch


class ToolRegistry:
    """Tools by name, in a fixed order (the ``tools`` list must stay byte-stable
    between requests so the engine's prefix cache keeps hitting)."""

    def __init__(self, tools: list[Tool]) -> None:
        self._tools = {t.name: t for t in tools}
        self._specs = [t.spec() for t in tools]

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> list[dict[str, Any]]:
        return self._specs


def default_tools(extra: Sequence[Tool] | None = None,
                  only: Sequence[str] | None = None) -> ToolRegistry:
    """The built-in tools (those named in ``only``, if given), then ``extra`` (a
    session's MCP tools), in a fixed order."""
    builtin: list[Tool] = [
        ReadFile(), WriteFile(), EditFile(), MultiEdit(), ListFiles(), Grep(), Bash(),
        GitStatus(), GitDiff(), GitLog(), GitCommit(), Todo(),
    ]
    if only:
        unknown = sorted(set(only) - {t.name for t in builtin})
        if unknown:
            raise UserError(f"unknown tool(s) {', '.join(unknown)} in the tool list (the "
                            f"built-in tools are: {', '.join(t.name for t in builtin)})")
        builtin = [t for t in builtin if t.name in only]
    return ToolRegistry([*builtin, *(extra or [])])


__all__ = [
    "Bash",
    "BwrapStatus",
    "EditChecker",
    "EditFeedback",
    "EditFile",
    "GitCommit",
    "GitDiff",
    "GitLog",
    "GitStatus",
    "Grep",
    "ListFiles",
    "MultiEdit",
    "Preview",
    "ReadFile",
    "Sandbox",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolKind",
    "ToolOutput",
    "Todo",
    "TodoList",
    "ToolRegistry",
    "WebFetch",
    "WriteFile",
    "cap_output",
    "check_read_only",
    "default_tools",
    "find_bwrap",
    "is_read_only_command",
    "resolve_in_workspace",
    "unified_diff",
    "workspace_listing",
]
