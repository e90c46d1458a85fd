"""A tool call as a card: the tool, its arguments, its result; edits as a diff; a
``task`` call's sub-conversation folded inside it (:class:`TaskActivity`)."""

from __future__ import annotations

import json
from typing import Any, Literal

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import Collapsible, Static

from sparkcode.agent.core import events as ev

ToolState = Literal["running", "waiting", "done", "failed", "denied"]

RESULT_LINES = 12
"""Result lines shown on a card; the rest is summarised."""
ARG_CHARS = 200
"""Characters of one argument value shown on a card."""


def diff_text(diff: str) -> Text:
    """A unified diff coloured line by line."""
    out = Text()
    for line in diff.splitlines():
        if line.startswith(("+++", "---")):
            style = "bold"
        elif line.startswith("@@"):
            style = "cyan"
        elif line.startswith("+"):
            style = "green"
        elif line.startswith("-"):
            style = "red"
        else:
            style = ""
        out.append(line + "\n", style=style)
    out.rstrip()
    return out


def format_arguments(arguments: dict[str, Any] | str) -> str:
    """``key=value`` pairs, long values shortened; raw text if not a mapping."""
    if isinstance(arguments, str):
        return arguments if len(arguments) <= ARG_CHARS else arguments[:ARG_CHARS] + "…"
    parts: list[str] = []
    for key, value in arguments.items():
        shown = value if isinstance(value, str) else json.dumps(value)
        shown = shown.replace("\n", "⏎")
        if len(shown) > ARG_CHARS:
            shown = shown[:ARG_CHARS] + f"… ({len(shown)} chars)"
        parts.append(f"{key}={shown}")
    return "  ".join(parts)


def shorten_result(result: str, lines: int = RESULT_LINES) -> str:
    rows = result.rstrip("\n").splitlines()
    if len(rows) <= lines:
        return "\n".join(rows)
    return "\n".join(rows[:lines] + [f"… {len(rows) - lines} more lines"])


_STATE_LABEL: dict[ToolState, str] = {
    "running": "running",
    "waiting": "waiting for approval",
    "done": "done",
    "failed": "failed",
    "denied": "denied",
}


class ToolCard(Vertical):
    """One tool call and, once it ran, its outcome."""

    state: reactive[ToolState] = reactive("running")
    """Where the call stands."""

    def __init__(
        self, call_id: str, tool: str, arguments: dict[str, Any] | str, *, diff: str | None = None
    ) -> None:
        super().__init__(classes="tool-card")
        self.call_id = call_id
        """The tool call's id in the conversation."""
        self.tool = tool
        """The tool's name."""
        self.arguments = arguments
        """The arguments the model sent."""
        self._header = Static("", classes="tool-header")
        self._args = Static(Text(format_arguments(arguments)), classes="tool-args")
        self._diff = Static(diff_text(diff) if diff else "", classes="tool-diff")
        self._diff.display = bool(diff)
        self._result = Static("", classes="tool-result")
        self._result.display = False
        self._hooks = Static("", classes="tool-hooks")
        self._hooks.display = False
        self.hook_lines: list[str] = []
        """What the call's hooks reported, one line each (``HookRan``)."""
        self.activity: TaskActivity | None = None
        """A ``task`` call's sub-conversation, once its first event came."""

    def compose(self) -> ComposeResult:
        yield self._header
        yield self._args
        yield self._diff
        yield self._result
        yield self._hooks

    def on_mount(self) -> None:
        self._render_header()

    def set_diff(self, diff: str) -> None:
        self._diff.update(diff_text(diff))
        self._diff.display = bool(diff)

    def set_result(self, result: str, *, ok: bool = True) -> None:
        """Show the tool's output and mark the call finished."""
        self._result.update(Text(shorten_result(result)))
        self._result.display = bool(result.strip())
        self.state = "done" if ok else "failed"

    async def task_event(self, event: ev.Event) -> None:
        """One event of this ``task`` call's sub-conversation (``TaskEvent``)."""
        if self.activity is None:
            self.activity = TaskActivity()
            await self.mount(self.activity, after=self._args)
        await self.activity.handle(event)

    def add_hook(self, line: str, *, ok: bool = True) -> None:
        """Show one hook's outcome under the result (red when it failed)."""
        self.hook_lines.append(line)
        self._hooks.update(
            Text("\n".join(f"↳ {h}" for h in self.hook_lines), style="" if ok else "red")
        )
        self._hooks.display = True

    def watch_state(self, old: ToolState, new: ToolState) -> None:
        self.remove_class(f"-{old}")
        self.add_class(f"-{new}")
        self._render_header()

    def _render_header(self) -> None:
        header = Text()
        header.append("⚙ ", style="bold")
        header.append(self.tool, style="bold")
        header.append(f"  {_STATE_LABEL[self.state]}", style="italic")
        self._header.update(header)


class TaskActivity(Collapsible):
    """A ``task`` call's read-only sub-conversation, folded (collapsed by default)
    inside the call's card: its own tool calls as cards; the title counts them."""

    def __init__(self) -> None:
        super().__init__(title="explore: starting", collapsed=True, classes="task-activity")
        self.cards: dict[str, ToolCard] = {}
        """The sub-conversation's tool calls by call ID."""
        self.requests = 0
        self.ended: str | None = None
        """How the sub-conversation ended (its ``TurnFinished`` reason)."""

    async def handle(self, event: ev.Event) -> None:
        match event:
            case ev.RequestStarted():
                self.requests += 1
            case ev.ToolCallStarted(call_id=call_id, name=name):
                card = ToolCard(call_id, name, event.arguments or event.raw_arguments)
                self.cards[call_id] = card
                await self.query_one(Collapsible.Contents).mount(card)
            case ev.ApprovalResolved(call_id=call_id, approved=False):
                if call_id in self.cards:
                    self.cards[call_id].state = "denied"
            case ev.ToolCallFinished(call_id=call_id):
                done = self.cards.get(call_id)
                if done is not None:
                    denied = done.state == "denied"
                    done.set_result(event.result, ok=event.error is None)
                    if denied:
                        done.state = "denied"
            case ev.TurnFinished(reason=reason):
                self.ended = reason
            case _:
                return
        self.title = self.describe()

    def describe(self) -> str:
        calls = len(self.cards)
        text = (
            f"explore: {self.requests} request{'s' if self.requests != 1 else ''}, "
            f"{calls} tool call{'s' if calls != 1 else ''}"
        )
        if self.ended is not None:
            text += ", done" if self.ended == "stop" else f", ended: {self.ended}"
        return text
