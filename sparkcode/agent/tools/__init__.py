"""The agent's tools and the registry the loop offers to the model."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from engine.errors import UserError

from ._after_edit import NAMES_LEFT
from ._apply import FileChange, apply_changes, changes_diff, plan_changes
from ._ask import ASK_TOOL, AskUser
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
from ._job_tools import JobOutput, JobStop
from ._jobs import Job, JobError, JobTable
from ._kept import KeptFiles, is_test_file
from ._readonly import check_read_only, is_read_only_command
from ._sandbox import BwrapStatus, Sandbox, find_bwrap
from ._shell import Bash
from ._task import TASK_TOOL, TaskTool
from ._todo import Todo
from ._walk import walk_files
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

    def without_kinds(self, kinds: Collection[str]) -> ToolRegistry:
        """The same tools but those of the given kinds (a question turn: no ``edit``)."""
        view = ToolRegistry([t for t in self._tools.values() if t.kind not in kinds])
        view._specs = [s for s in self._specs if s["function"]["name"] in view._tools]
        return view

    def hiding(self, arguments: Collection[str]) -> ToolRegistry:
        """The same tools with the optional arguments named ``TOOL.ARG`` left out of
        their specs, so the model never sets them (their defaults apply). A name for a
        tool not offered is passed over; an unknown or required argument is refused."""
        hidden: dict[str, set[str]] = {}
        for name in arguments:
            tool_name, _, arg = name.partition(".")
            tool = self._tools.get(tool_name)
            if tool is None:
                continue
            props = tool.spec()["function"]["parameters"].get("properties", {})
            if arg not in props or arg in tool.required:
                raise UserError(
                    f"hidden_arguments: {name!r} is not an optional argument "
                    f"of {tool_name} (its optional arguments: "
                    f"{', '.join(p for p in props if p not in tool.required)})"
                )
            hidden.setdefault(tool_name, set()).add(arg)
        view = ToolRegistry(list(self._tools.values()))
        for spec in view._specs:
            drop = hidden.get(spec["function"]["name"])
            if drop:
                params = dict(spec["function"]["parameters"])
                params["properties"] = {
                    k: v for k, v in params["properties"].items() if k not in drop
                }
                spec["function"] = {**spec["function"], "parameters": params}
        return view


NAVIGATION_TOOLS = ("definition", "references", "rename")
"""The language server's tools (``sparkcode.agent.lsp.navigation_tools``): built-in
names a tool list may give, offered only where a server for the language runs."""


def default_tools(
    extra: Sequence[Tool] | None = None,
    only: Sequence[str] | None = None,
    *,
    task: bool = True,
    navigation: Sequence[Tool] = (),
) -> ToolRegistry:
    """The built-in tools (those named in ``only``, if given; ``task`` unless
    ``task`` is False) with the ``navigation`` tools the session's language servers
    can answer (named in :data:`NAVIGATION_TOOLS`), then ``extra`` (a session's skills,
    web and MCP tools), in a fixed order."""
    builtin: list[Tool] = [
        ReadFile(),
        WriteFile(),
        EditFile(),
        MultiEdit(),
        ListFiles(),
        Grep(),
        Bash(),
        JobOutput(),
        JobStop(),
        GitStatus(),
        GitDiff(),
        GitLog(),
        GitCommit(),
        Todo(),
        *([TaskTool()] if task else []),
        AskUser(),
        *(t for t in navigation if t.name in NAVIGATION_TOOLS),
    ]
    if only:
        known = {t.name for t in builtin} | set(NAVIGATION_TOOLS)
        unknown = sorted(set(only) - known)
        if unknown:
            names = [
                *(t.name for t in builtin if t.name not in NAVIGATION_TOOLS),
                *NAVIGATION_TOOLS,
            ]
            raise UserError(
                f"unknown tool(s) {', '.join(unknown)} in the tool list (the "
                f"built-in tools are: {', '.join(names)})"
            )
        # bash offers ``background`` only beside the tools that read and stop a job.
        jobs = "job_output" in only
        builtin = [
            Bash(background=jobs) if t.name == "bash" else t for t in builtin if t.name in only
        ]
    return ToolRegistry([*builtin, *(extra or [])])


__all__ = [
    "ASK_TOOL",
    "AskUser",
    "Bash",
    "BwrapStatus",
    "EditChecker",
    "EditFeedback",
    "EditFile",
    "FileChange",
    "GitCommit",
    "GitDiff",
    "GitLog",
    "GitStatus",
    "Grep",
    "Job",
    "JobError",
    "JobOutput",
    "JobStop",
    "JobTable",
    "KeptFiles",
    "ListFiles",
    "MultiEdit",
    "NAVIGATION_TOOLS",
    "NAMES_LEFT",
    "Preview",
    "ReadFile",
    "Sandbox",
    "TASK_TOOL",
    "TaskTool",
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
    "apply_changes",
    "cap_output",
    "changes_diff",
    "check_read_only",
    "is_test_file",
    "default_tools",
    "find_bwrap",
    "walk_files",
    "is_read_only_command",
    "plan_changes",
    "resolve_in_workspace",
    "unified_diff",
    "workspace_listing",
]
