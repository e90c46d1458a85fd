"""The ``task`` tool's read-only explore sub-conversation, which returns a summary.

Exploring a large repository fills the context the task needs; the model can
instead hand a question to a sub-conversation (``task(prompt=...)``) and get
back only its answer (the tool is ``tools/_task.py``; this module runs what
it asks for). The sub-conversation is another :class:`~.loop.Agent`
on the same engine and client, with:

- the same system prompt and the same tool list, byte for byte, so its first
  request shares the conversation's prompt prefix and the engine's prefix cache
  serves it (the explore instructions go in its user message, as plan mode's);
- the read-only rule of plan mode (:meth:`.permissions.Permissions.read_only`):
  edits, writes, commits, MCP tools, ``web_fetch`` and shell commands that are
  not read-only are refused with :data:`TASK_REFUSAL`; the config's deny rules
  still apply; nothing asks the user (a question, such as the loop guard's, is
  answered no by :func:`_no_one_to_ask`);
- no hooks, no undo snapshots (nothing changes), its own todo list, no ``task``
  of its own (one at a time, never nested);
- at most ``settings.task_max_requests`` model requests.

Its events reach the front wrapped in :class:`~.events.TaskEvent` (the TUI
shows them inside the task's tool card; ``run --json`` prints them; the
recorder writes them), and its requests carry
:data:`~._chat_types.TASK_HEADER`, so the recording tells them from the
conversation's when a session is resumed or played back. Cancelling the turn
cancels the sub-conversation. How it ended becomes the tool's result: its
answer, or an error naming why there is none.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Protocol

from ..tools import TASK_TOOL, ToolError, ToolOutput
from ..wire.client import ChatClient
from .events import AgentError, ApprovalDecision, ApprovalRequested, Event, TurnFinished
from .images import ImageAttachment
from .permissions import Permissions
from .settings import AgentSettings


class Conversation(Protocol):
    """What a task needs of an agent (``loop.Agent``), the conversation's and its own,
    named here so this module does not import the loop."""

    client: ChatClient
    settings: AgentSettings
    permissions: Permissions
    requests_sent: int

    @property
    def cancelled(self) -> bool: ...

    def cancel(self) -> None: ...

    def run_turn(
        self, user_text: str, images: Sequence[ImageAttachment] = ()
    ) -> AsyncIterator[Event]: ...


Spawn = Callable[
    [
        ChatClient,
        AgentSettings,
        Permissions,
        Callable[[ApprovalRequested], Awaitable[ApprovalDecision]],
    ],
    Conversation,
]
"""Makes the sub-conversation: the conversation's system prompt and tools with this
client, settings, permissions and approver, and no task of its own."""

TASK_NOTE = (
    "\n\n[You are an explore subagent working for another agent, which sees only your "
    "final answer. Only read-only tools run: read, search and list files, read-only shell "
    "commands and git queries; nothing can be changed. Investigate what is asked, then "
    "answer with a concise summary of what you found: the relevant files, functions and "
    "line numbers, and the facts asked for.]"
)
"""Appended to the task's prompt, as plan mode's note is (the system prompt stays the
conversation's)."""
TASK_REFUSAL = (
    "an explore task is read-only: this call would change something, so it was "
    "not run. Do not retry it: investigate with read-only tools and answer with "
    "what you found"
)
_REASONS = {
    "max_turns": "it used all its model requests ({cap}) without a final answer",
    "loop": "it repeated the same calls",
    "degenerate": "its output degenerated (looping or garbled text)",
    "length": "its answer hit the output token limit",
}


async def _no_one_to_ask(request: ApprovalRequested) -> ApprovalDecision:
    """Inside a task nothing asks the user: a question is answered no, by rule."""
    return ApprovalDecision(
        approved=False,
        by="rule",
        reason="an explore task cannot ask the user; it stays read-only and inside the sandbox",
    )


class Explorer:
    """Runs the ``task`` tool's sub-conversations for one agent, one at a time."""

    def __init__(self, parent: Conversation, spawn: Spawn) -> None:
        self.parent = parent
        self.spawn = spawn
        self.child: Conversation | None = None
        """The sub-conversation running now, if any."""

    def cancel(self) -> None:
        if self.child is not None:
            self.child.cancel()

    def _child(self, call_id: str) -> Conversation:
        parent = self.parent
        settings = replace(
            parent.settings,
            max_turns=parent.settings.task_max_requests,
            force_tool=None,
            force_tool_parameters=None,
            workspace_files=False,
            attach_files=0,
        )
        child = self.spawn(
            parent.client.for_task(call_id),
            settings,
            parent.permissions.read_only(TASK_REFUSAL, TASK_NOTE),
            _no_one_to_ask,
        )
        child.requests_sent = parent.requests_sent  # one sequence of derived seeds
        return child

    async def __call__(self, prompt: str, call_id: str) -> AsyncIterator[Event | ToolOutput]:
        parent = self.parent
        if self.child is not None:
            raise ToolError("another explore task is running; wait for its summary")
        if parent.cancelled:
            raise ToolError("the turn was cancelled before the explore task started")
        child = self.child = self._child(call_id)
        finished: TurnFinished | None = None
        error: AgentError | None = None
        try:
            async for event in child.run_turn(prompt):
                if parent.cancelled and not child.cancelled:
                    child.cancel()  # a cancel that came before the child's turn began
                if isinstance(event, AgentError):
                    error = event
                elif isinstance(event, TurnFinished):
                    finished = event
                yield event
        finally:
            self.child = None
            parent.requests_sent = child.requests_sent
        yield ToolOutput(_result(finished, error, child.settings.max_turns))


def _result(finished: TurnFinished | None, error: AgentError | None, cap: int) -> str:
    """The sub-conversation's answer, or a :class:`ToolError` saying why there is none."""
    if finished is None or finished.reason == "cancelled":
        raise ToolError("the explore task was cancelled")
    answer = finished.content.strip()
    if finished.reason == "error":
        why = error.message if error is not None else "the request failed"
        raise ToolError(f"the explore task failed: {why}")
    if finished.reason == "stop" and answer:
        return answer
    if finished.reason == "stop":
        raise ToolError("the explore task ended without an answer")
    why = _REASONS.get(finished.reason, f"it stopped ({finished.reason})").format(cap=cap)
    said = f"; its last words: {answer}" if answer else ""
    raise ToolError(f"the explore task has no summary: {why}{said}")


__all__ = ["TASK_NOTE", "TASK_REFUSAL", "TASK_TOOL", "Explorer"]
