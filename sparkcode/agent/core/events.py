"""Everything the agent loop tells the outside world, as small typed events.

:meth:`sparkcode.agent.core.loop.Agent.run_turn` is an async generator of these
events, and every event is also handed to each ``on_event`` subscriber first
(the session recorder subscribes; the TUI and ``sparkcode run`` iterate). The
events are plain frozen dataclasses so they can be logged as JSON with
:func:`event_to_json`; the only live object is the future inside
:class:`ApprovalRequested`.

Order within one turn::

    TurnStarted
      ( RequestStarted
        ReasoningDelta* ContentDelta* UsageUpdate* [DegenerationDetected]
        [BudgetExceeded] [Notice]
        ( ToolCallStarted HookRan* [SnapshotTaken] [ApprovalRequested ApprovalResolved]
          HookRan* ToolCallFinished [TodoUpdated] )*
        MetricsUpdate? [SteerDelivered]* )+
    [ContextCompacted] [AgentError]
    TurnFinished

A ``task`` call (:mod:`~sparkcode.agent.core.subagent`) runs a read-only
sub-conversation between its ``ToolCallStarted`` and ``ToolCallFinished``; each
of that conversation's events (its own ``TurnStarted`` ... ``TurnFinished``)
comes wrapped in a :class:`TaskEvent` naming the call, so a consumer that does
not know it shows the call as any other.

``HookRan`` also comes before the first request (``SessionStart``,
``UserPromptSubmit``) and after the last reply (``Stop``); a call's hooks
carry its ``call_id`` (``PreToolUse`` before the approval, ``PostToolUse``
after the tool ran). ``TodoUpdated`` follows a ``todo`` call that changed the list. The deltas and
usage updates of one request interleave as the stream delivers them.

In small-model mode (one JSON step per reply) ``ContentDelta`` carries the
step's ``answer`` string, decoded, and a tool step streams none: its
``ToolCallStarted`` is all there is of it, as in normal mode.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Literal

ApprovalKind = Literal["edit", "shell", "git", "loop", "other"]
TodoStatus = Literal["pending", "in_progress", "done"]
TODO_STATUSES: tuple[TodoStatus, ...] = ("pending", "in_progress", "done")
FinishReason = Literal[
    "stop", "max_turns", "loop", "denied", "error", "cancelled", "length", "degenerate", "blocked"
]
"""``blocked``: a ``UserPromptSubmit`` hook refused the prompt (nothing was sent)."""


@dataclass(frozen=True, kw_only=True)
class Event:
    """Base class: every event records when it happened (``time.time()``)."""

    at: float = field(default_factory=time.time, compare=False)

    @property
    def event_type(self) -> str:
        """The event's type name, as written in JSON (``"ContentDelta"``...)."""
        return type(self).__name__


@dataclass(frozen=True, kw_only=True)
class TurnStarted(Event):
    """The user sent ``user_text``; ``turn`` counts user turns from 1."""

    turn: int
    user_text: str
    images: tuple[str, ...] = ()
    """The attached images, described (``shot.png (PNG, 1280x800, 211.4 KiB)``)."""


@dataclass(frozen=True, kw_only=True)
class RequestStarted(Event):
    """One chat-completions request is about to be sent (a turn makes several)."""

    request: int
    """Requests sent so far in this turn, counting this one (from 1)."""
    reasoning_effort: str | None
    thinking_token_budget: int | None
    """``None`` when the field is not sent (server rejected it, or unlimited)."""
    messages: int


@dataclass(frozen=True, kw_only=True)
class ReasoningDelta(Event):
    """Streamed thinking text. ``tokens_so_far`` counts tokens, not frames."""

    text: str
    tokens_so_far: int
    budget: int | None


@dataclass(frozen=True, kw_only=True)
class ContentDelta(Event):
    """Streamed answer text (markdown): what the user reads. In small-model mode
    the decoded ``answer`` of the JSON step, not the JSON (``step_text``)."""

    text: str


@dataclass(frozen=True, kw_only=True)
class ToolCallStarted(Event):
    """The model asked for a tool. ``arguments`` is ``{}`` when they did not parse;
    ``raw_arguments`` is what the model actually sent."""

    call_id: str
    name: str
    arguments: dict[str, Any]
    raw_arguments: str


@dataclass(frozen=True, kw_only=True)
class ApprovalDecision:
    """The answer to an :class:`ApprovalRequested`."""

    approved: bool
    reason: str = ""
    """Shown to the model when refused (e.g. what to do instead)."""
    always: bool = False
    """Allow this tool without asking for the rest of the session."""
    by: Literal["user", "rule"] = "user"
    """Who answered. A person's refusal ends the turn (they want to say what next);
    ``"rule"`` is a program's policy (``sparkcode bench agent``'s approver): the call
    is refused, its ``reason`` is the tool result, and the turn goes on, so the
    model can do it another way."""


@dataclass(frozen=True, kw_only=True)
class ApprovalRequested(Event):
    """The loop waits until :meth:`respond` is called (or the agent's ``approver``
    callback answers). ``detail`` is the unified diff of an edit or the shell
    command; ``kind="loop"`` asks whether to go on when the calls go round in circles
    (``loop_guard``: repeated, cycling, or retried after failing)."""

    call_id: str
    tool: str
    kind: ApprovalKind
    summary: str
    detail: str
    future: asyncio.Future[ApprovalDecision] = field(compare=False, repr=False)

    def respond(self, decision: ApprovalDecision | bool) -> None:
        """Answer the request (idempotent: later answers are ignored)."""
        if isinstance(decision, bool):
            decision = ApprovalDecision(approved=decision)
        if not self.future.done():
            self.future.get_loop().call_soon_threadsafe(_set_if_pending, self.future, decision)


def _set_if_pending(fut: asyncio.Future[ApprovalDecision], value: ApprovalDecision) -> None:
    if not fut.done():
        fut.set_result(value)


@dataclass(frozen=True, kw_only=True)
class ApprovalResolved(Event):
    """How an approval request was answered (or decided by rules/mode)."""

    call_id: str
    tool: str
    approved: bool
    by: Literal["user", "rule", "mode"]
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class ToolCallFinished(Event):
    """A tool call's result as sent back to the model. ``error`` is set when the
    call failed or was refused (``result`` then carries the same message);
    ``diff`` is the unified diff of a file edit."""

    call_id: str
    name: str
    result: str
    error: str | None = None
    diff: str | None = None
    duration_s: float = 0.0


@dataclass(frozen=True, kw_only=True)
class HookRan(Event):
    """A hook command ran (:mod:`sparkcode.agent.extensions.hooks`). ``exit_code`` is None when
    it timed out (its process group was killed) or could not start; ``blocked``
    (exit 2) means it stopped what the event was about, with ``stderr`` as the
    reason given to the model; any other non-zero exit is an error shown to the
    user only."""

    hook_event: str
    command: str
    source: str
    exit_code: int | None
    stdout: str
    stderr: str
    blocked: bool = False
    timed_out: bool = False
    duration_s: float = 0.0
    call_id: str | None = None
    tool: str | None = None

    @property
    def failed(self) -> bool:
        """A non-blocking error: a crash, a timeout, an exit other than 0 and 2."""
        return not self.blocked and self.exit_code != 0


@dataclass(frozen=True, kw_only=True)
class TodoItem:
    """One entry of the todo list; ``id`` counts from 1 and never changes."""

    id: int
    text: str
    status: TodoStatus = "pending"


@dataclass(frozen=True, kw_only=True)
class TodoUpdated(Event):
    """A ``todo`` call changed the list; ``items`` is the whole list, in order."""

    items: tuple[TodoItem, ...]


@dataclass(frozen=True, kw_only=True)
class BudgetExceeded(Event):
    """Thinking passed ``budget`` (+ margin) without the server ending it; the
    stream was cut and the turn continues with thinking off."""

    used: int
    budget: int


@dataclass(frozen=True, kw_only=True)
class DegenerationDetected(Event):
    """The degeneration detector fired on the streamed ``channel`` (``content`` or
    ``reasoning``). With ``stopped`` the stream was closed there and the turn ends
    with reason ``degenerate``; otherwise it is only a warning."""

    channel: Literal["content", "reasoning"]
    pattern: str
    detail: str
    chars: int
    """Characters of that channel streamed when it fired."""
    stopped: bool


@dataclass(frozen=True, kw_only=True)
class Notice(Event):
    """Something the user should know that is not an error (a dropped request
    field, a fallback, a compaction)."""

    message: str
    code: str = ""
    """Stable machine name, e.g. ``thinking_budget_unsupported``."""


@dataclass(frozen=True, kw_only=True)
class UsageUpdate(Event):
    """Token accounting from the server's ``usage`` (continuous during a stream).

    Rates are ``None`` until measurable: ``decode_tok_s`` = completion tokens
    after the first / time since the first token; ``prefill_tok_s`` = prompt
    tokens / TTFT."""

    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int
    ttft_s: float | None
    decode_tok_s: float | None
    prefill_tok_s: float | None
    context_used: int
    context_limit: int | None
    cached_tokens: int | None = None
    final: bool = False
    """True for the last update of a request."""


@dataclass(frozen=True, kw_only=True)
class MetricsUpdate(Event):
    """Engine-side figures from ``/metrics`` deltas since the previous poll;
    ``None`` where the engine does not export them (or nothing happened)."""

    acceptance_length: float | None
    """Speculative decoding: 1 + accepted / drafts."""
    acceptance_per_pos: tuple[float, ...] | None = None
    """Speculative decoding: accepted at draft position i / drafts, position 0 first."""
    prefix_cache_hit_rate: float | None
    """Prefix-cache hits / queries, in tokens."""
    kv_cache_usage: float | None
    """KV-cache use, 0..1 (a gauge, not a delta)."""
    running: int | None = None
    waiting: int | None = None


@dataclass(frozen=True, kw_only=True)
class SnapshotTaken(Event):
    """The workspace was snapshotted (for undo) before the first change of a turn."""

    snapshot: str
    turn: int


@dataclass(frozen=True, kw_only=True)
class UndoApplied(Event):
    """The last turn was undone: the workspace restored to ``snapshot`` (empty when
    the turn changed no file) and its ``messages_removed`` messages taken off the
    end of the conversation; ``changed`` lists the paths touched."""

    snapshot: str
    changed: tuple[str, ...]
    turn: int | None = None
    """The turn undone; None for a files-only undo (no turn of this conversation)."""
    messages_removed: int = 0


@dataclass(frozen=True, kw_only=True)
class RedoApplied(Event):
    """An undone turn came back: its files (``changed``) and its messages."""

    turn: int
    changed: tuple[str, ...]
    messages_restored: int


@dataclass(frozen=True, kw_only=True)
class ContextCompacted(Event):
    """Older turns were replaced by a summary to stay under the context limit."""

    tokens_before: int
    tokens_after_estimate: int
    messages_summarised: int


@dataclass(frozen=True, kw_only=True)
class AgentError(Event):
    """The turn could not go on (engine gone, HTTP error...). History up to the
    failure is kept; the user can retry with the next message."""

    message: str
    code: str = ""


@dataclass(frozen=True, kw_only=True)
class SteerDelivered(Event):
    """A message the user sent while the turn ran (``Agent.steer``) joined the
    conversation after the tool results, before request ``request`` of the turn."""

    text: str
    request: int


@dataclass(frozen=True, kw_only=True)
class ModeChanged(Event):
    """The permission mode is now ``mode`` (``Agent.set_mode``: the TUI's /approve, an
    editor's session mode). Recorded, so a loaded session gets its mode back."""

    mode: str


@dataclass(frozen=True, kw_only=True)
class TurnFinished(Event):
    """The turn ended. ``content`` is the final assistant answer (may be empty)."""

    reason: FinishReason
    content: str
    requests: int
    prompt_tokens: int
    completion_tokens: int
    loops: dict[str, int] = field(default_factory=dict)
    """Times the loop guard asked, by pattern (``repeat``, ``cycle``, ``failing``)."""


@dataclass(frozen=True, kw_only=True)
class TaskEvent(Event):
    """One event of the sub-conversation that the ``task`` call ``call_id`` runs
    (:mod:`~sparkcode.agent.core.subagent`): shown nested under that call, recorded
    as ``{"call_id": ..., "event": {"type": ..., ...}}``."""

    call_id: str
    event: Event


def event_to_json(event: Event) -> dict[str, Any]:
    """A JSON-ready dict: ``{"type": <event_type>, ...fields}`` (futures left out; a
    :class:`TaskEvent`'s inner event as such a dict too)."""
    out: dict[str, Any] = {"type": event.event_type}
    for f in dataclasses.fields(event):
        if f.name == "future":
            continue
        value = getattr(event, f.name)
        if isinstance(value, Event):
            value = event_to_json(value)
        elif isinstance(value, tuple):
            value = [
                dataclasses.asdict(v)
                if dataclasses.is_dataclass(v) and not isinstance(v, type)
                else v
                for v in value
            ]
        out[f.name] = value
    return out


__all__ = [
    "AgentError",
    "ApprovalDecision",
    "ApprovalKind",
    "ApprovalRequested",
    "ApprovalResolved",
    "BudgetExceeded",
    "ContentDelta",
    "ContextCompacted",
    "DegenerationDetected",
    "Event",
    "FinishReason",
    "HookRan",
    "MetricsUpdate",
    "ModeChanged",
    "Notice",
    "ReasoningDelta",
    "RedoApplied",
    "RequestStarted",
    "SnapshotTaken",
    "SteerDelivered",
    "TODO_STATUSES",
    "TaskEvent",
    "TodoItem",
    "TodoStatus",
    "TodoUpdated",
    "ToolCallFinished",
    "ToolCallStarted",
    "TurnFinished",
    "TurnStarted",
    "UndoApplied",
    "UsageUpdate",
    "event_to_json",
]
