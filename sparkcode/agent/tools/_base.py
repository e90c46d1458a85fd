"""What a tool is: a JSON schema for the model plus an async ``run``, and the
context it runs with (the workspace, limits, the sandbox, the session's todo
list, which lives here because the context holds it and the todo tool in
``_todo.py`` only edits it)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ..core.events import Event, TodoItem, TodoStatus

if TYPE_CHECKING:
    from ..core.asking import Asker
    from ._jobs import JobTable
    from ._sandbox import Sandbox

ToolKind = Literal["read", "edit", "shell", "git", "mcp", "state", "web"]
"""``read`` never changes anything; ``state`` changes only the session's own
state (the todo list); ``mcp`` is a server's tool; ``web`` reaches the network
(``web_fetch``); the others may need approval."""


class ToolError(Exception):
    """A tool refused or failed; the message goes back to the model as the result,
    so it must say what to do differently."""


MAX_ITEMS = 50
"""The most items a todo list holds."""
_MARKS = {"pending": " ", "in_progress": ">", "done": "x"}


@dataclass
class TodoList:
    """The session's todo items, in the order they were added."""

    items: tuple[TodoItem, ...] = field(default=())

    def add(self, texts: list[str]) -> None:
        next_id = max((i.id for i in self.items), default=0) + 1
        if len(self.items) + len(texts) > MAX_ITEMS:
            raise ToolError(
                f"the list would have more than {MAX_ITEMS} items; finish or merge some first"
            )
        new = [TodoItem(id=next_id + n, text=t) for n, t in enumerate(texts)]
        self.items = (*self.items, *new)

    def update(self, item_id: int, status: TodoStatus | None, text: str | None) -> None:
        ids = [i.id for i in self.items]
        if item_id not in ids:
            known = f"the items are {ids[0]}-{ids[-1]}" if ids else "the list is empty"
            raise ToolError(f"there is no item {item_id}; {known}")
        self.items = tuple(
            replace(i, status=status or i.status, text=text or i.text) if i.id == item_id else i
            for i in self.items
        )

    def clear(self) -> None:
        self.items = ()

    def render(self) -> str:
        if not self.items:
            return "the todo list is empty"
        done = sum(i.status == "done" for i in self.items)
        lines = [f"todo list ({done} of {len(self.items)} done):"]
        lines += [f"{i.id:>3}. [{_MARKS[i.status]}] {i.text}" for i in self.items]
        return "\n".join(lines)


Explore = Callable[[str, str], AsyncIterator["Event | ToolOutput"]]
"""Runs a read-only sub-conversation for the ``task`` tool: given the prompt and the
task call's ID it yields that conversation's events, then the tool's output
(:class:`~sparkcode.agent.core.subagent.Explorer`)."""


@dataclass(frozen=True)
class EditFeedback:
    """What a checker says after an edit: text for the model, a notice for the user."""

    text: str = ""
    """Appended to the edit's result (the problems the edit introduced); empty: none."""
    notice: str | None = None
    """Told to the user (a checker that is missing, crashed or slow), not to the model."""


class KeptRule(Protocol):
    """Which files a turn keeps as they are (``._kept.KeptFiles``; a protocol here so
    that the context does not import the rule's module, which raises ``ToolError``)."""

    def why(self, rel: str) -> str | None:
        """Why ``rel`` is kept, in words for the model, or None."""
        ...


class EditChecker(Protocol):
    """Looks at a file after an edit (``sparkcode.agent.lsp.Diagnostics``)."""

    async def check(self, path: Path, shown: str, before: str, after: str) -> EditFeedback:
        """The problems ``after`` has that ``before`` had not; never raises."""
        ...


@dataclass
class ToolContext:
    """What every tool call may use."""

    workspace: Path
    """Resolved, absolute workspace root; file tools never leave it."""
    bash_timeout_s: float = 120.0
    output_cap: int = 30_000
    """Characters of tool output sent back to the model before capping."""
    sandbox: Sandbox | None = None
    """Where shell commands run; ``None`` = directly (approved or not sandboxing)."""
    todos: TodoList = field(default_factory=lambda: TodoList())
    """The session's todo list (the todo tool's state)."""
    explore: Explore | None = None
    """The ``task`` tool's sub-conversations; None where there are none (inside one)."""
    call_id: str = ""
    """The ID of the call being run (set for each call)."""

    checker: EditChecker | None = None
    """Checks each edited file (language-server diagnostics); None: no checks."""

    hidden_arguments: frozenset[str] = frozenset()
    """Optional arguments left out of the tools' specs (``TOOL.ARG``, ``[agent]
    hidden_arguments``): error messages do not tell the model to set them."""

    refuse_syntax_errors: bool = False
    """Refuse an edit that leaves a Python, JSON or TOML file unparsable (``[agent]
    refuse_syntax_errors``, :mod:`._syntax`)."""

    refuse_lost_definitions: bool = False
    """Refuse a change that would delete a Python file's functions, classes or methods
    the message does not name (``[agent] refuse_lost_definitions``, :mod:`._lost`)."""

    task: str = ""
    """The current turn's message; the loop sets it at each turn's start (the
    lost-definitions guard lets a change delete what the message names, and the
    task reminder repeats it)."""

    kept: KeptRule | None = None
    """The files this turn's message says not to change (``[agent] keep_told_files``,
    :mod:`._kept`); the loop sets it at each turn's start."""

    jobs: JobTable | None = None
    """The session's background jobs (``bash`` with ``background``, ``job_output``,
    ``job_stop``); None: none can start."""

    asker: Asker | None = None
    """Asks the person ``ask_user``'s questions (the front's, :mod:`..asking`); None:
    nobody can be asked."""


@dataclass
class ToolOutput:
    """A successful call's result text and, for edits, the unified diff."""

    text: str
    diff: str | None = None
    sandbox_denied: str | None = None
    """A sandboxed command failed on the sandbox's limits (the output's marker)."""
    notice: str | None = None
    """Something to tell the user, not the model (:attr:`EditFeedback.notice`)."""
    unfinished: bool = False
    """An edit that left work: a name it removed is still used elsewhere, or the
    language server found new problems (:func:`._after_edit.checked_edit`)."""


@dataclass
class Preview:
    """What the user approves: a one-line summary and the diff or command."""

    summary: str
    detail: str
    diff: str | None = None


@dataclass
class Tool:
    """One tool as offered to the model."""

    name: str
    description: str
    parameters: dict[str, Any]
    kind: ToolKind
    required: tuple[str, ...] = field(default=())

    def spec(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": {
                    "type": "object",
                    "properties": self.parameters,
                    "required": list(self.required),
                },
            },
        }

    def is_read_only(self, args: dict[str, Any], workspace: Path) -> bool:
        """Whether this particular call changes nothing and reads only inside
        ``workspace`` (bash decides per command)."""
        return self.kind in ("read", "state")

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> Preview:
        """Describe the call for an approval prompt (may raise :class:`ToolError`)."""
        return Preview(summary=f"{self.name}({_short(args)})", detail=_short(args, 2000))

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        raise NotImplementedError

    async def stream(
        self, args: dict[str, Any], ctx: ToolContext
    ) -> AsyncIterator[Event | ToolOutput]:
        """The call's progress events, then its output (last). Most tools have no
        progress: the ``task`` tool yields its sub-conversation's events."""
        yield await self.run(args, ctx)


def _short(args: dict[str, Any], limit: int = 120) -> str:
    text = ", ".join(f"{k}={v!r}" for k, v in args.items())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def cap_output(text: str, limit: int) -> str:
    """Keep head and tail of long output, with a note saying it was cut."""
    if len(text) <= limit:
        return text
    head = text[: limit * 2 // 3]
    tail = text[-(limit // 3) :]
    cut = len(text) - len(head) - len(tail)
    return f"{head}\n[... output capped: {cut} characters omitted ...]\n{tail}"
