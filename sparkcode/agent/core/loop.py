"""The agent loop: stream a reply, run its tool calls, repeat until it answers.

Design: :meth:`Agent.run_turn` is an async generator of
:mod:`~sparkcode.agent.core.events`; each event goes to every ``on_event``
subscriber (:meth:`Agent.subscribe`) just before it is yielded. Consumers
(the TUI, ``sparkcode run``) iterate; observers (the session recorder)
subscribe. Approvals: an :class:`ApprovalRequested` event carries a future;
the loop waits on it after yielding the event, so the consumer answers with
``event.respond(...)``; or give the agent an ``approver`` coroutine, which is
then asked instead (headless runs, tests).

The history (:attr:`Agent.history`) is the OpenAI message list; it is valid to
send at every point between turns (every tool call has its result), also
after an error or a cancelled turn, so nothing is lost and the user can go on.

This module is the conversation: its state between turns and what a front
may do with it (subscribe, cancel, steer, clear, undo and redo, images,
compaction). One turn, when to send, compact, retry, stop or end, is
``_turn.py``; the small-model mechanisms the turn calls at its named points
``scaffold/`` (:attr:`Agent.scaffold`); the ``task`` tool's read-only
sub-conversation ``subagent.py``; the settings and fixed prompts ``settings.py``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from ... import config as _config
from ...config import PermissionMode
from ..extensions.hooks import Hooks
from ..scaffold import Scaffold
from ..tools import (
    TASK_TOOL,
    EditChecker,
    JobTable,
    TodoList,
    ToolContext,
    ToolRegistry,
    default_tools,
)
from ..wire.client import ChatClient
from ..wire.metrics import MetricsPoller
from ..wire.sampling import request_seed
from ..wire.stream_idle import idle_timeout_s
from ._compaction import compact_when_needed
from ._execute import stop_note
from ._reply import empty_answer_note
from ._turn import turn_events
from .asking import Asker
from .calls import CheckedCall
from .context import ContextMeter, Message, repair_history
from .effort import effort_params, placement
from .events import (
    ApprovalDecision,
    ApprovalRequested,
    ApprovalResolved,
    Event,
    ModeChanged,
    RedoApplied,
    TodoUpdated,
    UndoApplied,
)
from .images import ImageAttachment, load_image, refuse_text_only
from .permissions import Permissions
from .rewind import Rewind
from .settings import ACT_PROMPT, DEFAULT_SYSTEM_PROMPT, PLAN_NOTE, AgentSettings
from .subagent import Explorer
from .undo import UndoError, UndoStore
from .user_shell import run_user_shell

log = logging.getLogger(__name__)

Approver = Callable[[ApprovalRequested], Awaitable[ApprovalDecision]]
Subscriber = Callable[[Event], None]


class Agent:
    """One conversation with one model in one workspace."""

    def __init__(
        self,
        client: ChatClient,
        workspace: Path,
        *,
        settings: AgentSettings | None = None,
        permissions: Permissions | None = None,
        tools: ToolRegistry | None = None,
        undo: UndoStore | None = None,
        metrics: MetricsPoller | None = None,
        approver: Approver | None = None,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
        hooks: Hooks | None = None,
        explore: bool = True,
        checker: EditChecker | None = None,
        jobs: JobTable | None = None,
        asker: Asker | None = None,
        scaffold: Scaffold | None = None,
    ) -> None:
        """``explore``: run the ``task`` tool's sub-conversations when the tools have it
        (False for such a sub-conversation itself); ``jobs``: the background jobs'
        table to share (a sub-conversation gets its conversation's); ``asker``: asks the
        person ``ask_user``'s questions (:attr:`asker`); ``scaffold``: the small-model
        policy (default: :meth:`Scaffold.for_settings`, every guard)."""
        self.client = client
        self.workspace = workspace.resolve()
        self.settings = settings or AgentSettings()
        self.permissions = permissions or Permissions(_config.Config())
        self.scaffold = scaffold or Scaffold.for_settings(self.settings)
        """The small-model mechanisms (``scaffold/``), called by each turn."""
        session = self.scaffold.start_session(
            self.workspace, tools or default_tools(), system_prompt
        )
        self.tools = session.tools
        self.undo_store = undo
        self.metrics = metrics
        self.approver = approver
        self.hooks = hooks
        """The session's hooks (:mod:`.hooks`); None or empty: none run."""
        self.session_started = False
        """A turn has run the hooks' session start (``startup`` or ``resume``)."""
        self.history: list[Message] = [{"role": "system", "content": session.system_prompt}]
        self.effort_pinned: str | None = None
        """The conversation's first effort, which a pinned placement sends in every
        request (``effort.py``); None before the first; a resume sets the recorded one."""
        self.context = ContextMeter(limit=self.settings.context_limit)
        self.turns = 0
        """Turns in the conversation (an undone turn is not counted)."""
        self.rewind = Rewind()
        """Turn marks for /undo and /redo."""
        self.requests_sent = 0
        """Model requests of this session so far (numbers the derived seeds)."""
        self._subscribers: list[Subscriber] = []
        self._cancel = False
        self.loop_counts: dict[str, int] = {}
        """The last turn's loop guard counts (its :attr:`TurnFinished.loops`)."""
        self.steering: list[str] = []
        """Messages handed to the running turn (:meth:`steer`), not delivered yet."""
        self.pending_context: list[str] = []
        """What the user ran with ``!cmd`` (:meth:`run_shell`) since the last message:
        it goes at the top of the next user message (``_turn.py``)."""
        self.todos = TodoList()
        """The todo tool's list; it outlives a switch between plan and act."""
        self.explorer: Explorer | None = (
            Explorer(self, self._task_agent) if explore and TASK_TOOL in self.tools.names else None
        )
        """Runs the ``task`` tool's read-only sub-conversations (``subagent.py``)."""
        self.jobs = jobs if jobs is not None else JobTable()
        """The session's background jobs; the session's close ends them."""
        self.jobs.offered = "job_output" in self.tools.names
        self.tool_context = ToolContext(
            workspace=self.workspace,
            bash_timeout_s=self.settings.bash_timeout_s,
            todos=self.todos,
            explore=self.explorer,
            checker=checker,
            jobs=self.jobs,
            asker=asker,
        )
        """What every tool call may use; the scaffold sets its guards' fields."""
        self.scaffold.set_up_tools(self.tool_context)

    # -- public API ----------------------------------------------------------

    @property
    def asker(self) -> Asker | None:
        """Who answers ``ask_user`` (:mod:`.asking`): the front sets it (the TUI's card,
        the editor over ACP, ``run``'s terminal); None: nobody can be asked."""
        return self.tool_context.asker

    @asker.setter
    def asker(self, asker: Asker | None) -> None:
        self.tool_context.asker = asker

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call ``callback`` with every event; returns a function that unsubscribes."""
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback)

    def cancel(self) -> None:
        """Stop the running turn at the next stream frame or tool boundary (a running
        ``task`` sub-conversation too)."""
        self._cancel = True
        if self.explorer is not None:
            self.explorer.cancel()

    @property
    def cancelled(self) -> bool:
        """The running turn was asked to stop."""
        return self._cancel

    def steer(self, text: str) -> None:
        """Give the running turn a user message at its next safe point: once the
        current tool calls have their results, before the next request. It is
        appended (no earlier message changes), so the request before it is the
        next one's prefix and the engine's prefix cache holds. A turn that ends
        before that point leaves it in :attr:`steering` for the caller to send."""
        self.steering.append(text)

    def set_mode(self, mode: PermissionMode | None) -> str | None:
        """Switch the permission mode (:meth:`Permissions.set_mode`: returns the notice
        when the sandbox is missing and ``ask`` is used) and record the mode in use."""
        notice = self.permissions.set_mode(mode)
        self._notify(ModeChanged(mode=self.permissions.mode))
        return notice

    async def run_shell(self, command: str, serial: int = 0) -> AsyncIterator[Event]:
        """``!cmd``: run the user's ``command`` under the ``bash`` tool's rules and keep
        its output for the next message (:mod:`.user_shell`); ``ValueError`` if empty."""
        async for event in run_user_shell(
            command,
            serial,
            tools=self.tools,
            permissions=self.permissions,
            ctx=self.tool_context,
            ask=self.ask_approval,
            pending=self.pending_context,
        ):
            self._notify(event)
            yield event

    def take_steering(self) -> list[str]:
        """The steered messages no turn delivered (emptied)."""
        texts, self.steering = self.steering, []
        return texts

    def clear(self) -> None:
        """Forget the conversation and the todo list (the system prompt stays)."""
        self.history = self.history[:1]
        self.effort_pinned = None
        self.pending_context = []
        if self.todos.items:
            self.todos.clear()
            self._notify(TodoUpdated(items=()))  # recorded, so a resume has no list either
        self.context = ContextMeter(limit=self.settings.context_limit)
        self.rewind.reset()
        self.turns = 0

    def undo(self) -> UndoApplied:
        """Undo the last turn: its file changes and its messages.

        With no turn of this conversation left (a fresh session), the newest
        snapshot of the workspace's undo store is restored, files only.
        """
        if not self.rewind.marks:
            if self.undo_store is None:
                raise UndoError("undo is not available (no snapshot store)")
            snap, changed = self.undo_store.undo()
            event = UndoApplied(snapshot=snap, changed=tuple(changed))
        else:
            self.history, event = self.rewind.undo(self.history, self.undo_store)
            self.turns = (event.turn or 1) - 1
            self.context = ContextMeter(limit=self.settings.context_limit)
        self._notify(event)
        return event

    def redo(self) -> RedoApplied:
        """Bring back the last undone turn (files and messages)."""
        self.history, event = self.rewind.redo(self.history, self.undo_store)
        self.turns = event.turn
        self.context = ContextMeter(limit=self.settings.context_limit)
        self._notify(event)
        return event

    def load_image(self, path: Path, name: str | None = None) -> ImageAttachment:
        """Read an image for the next message (``path`` relative to the workspace).
        :class:`~.images.ImageError` for a text-only model (named), a file that is not
        PNG/JPEG/WebP, one over ``settings.image_max_bytes``, or one unreadable."""
        if not self.settings.vision:
            raise refuse_text_only(self.client.model)
        full = path.expanduser()
        full = full if full.is_absolute() else self.workspace / full
        return load_image(full, max_bytes=self.settings.image_max_bytes, name=name or str(path))

    async def run_turn(
        self, user_text: str, images: Sequence[ImageAttachment] = ()
    ) -> AsyncIterator[Event]:
        """Send ``user_text`` (and ``images``, as content parts) and stream the turn's
        events until TurnFinished. Images for a model without ``settings.vision``
        raise :class:`~.images.ImageError` before the history changes."""
        if images and not self.settings.vision:
            raise refuse_text_only(self.client.model)
        self._cancel = False
        try:
            async for event in turn_events(self, user_text, tuple(images)):
                self._notify(event)
                yield event
        finally:
            repair_history(self.history)

    # -- internals -----------------------------------------------------------

    def _task_agent(
        self,
        client: ChatClient,
        settings: AgentSettings,
        permissions: Permissions,
        approver: Approver,
    ) -> Agent:
        """A ``task`` call's sub-conversation (``subagent.py``): this conversation's
        tools and system prompt as it is (the shared prefix), no task of its own."""
        child = Agent(
            client,
            self.workspace,
            settings=settings,
            permissions=permissions,
            tools=self.tools,
            approver=approver,
            explore=False,
            jobs=self.jobs,
        )
        child.history = [dict(self.history[0])]
        child.effort_pinned = self.effort_pinned  # the same first tokens as this one
        return child

    def _notify(self, event: Event) -> None:
        for callback in list(self._subscribers):
            try:
                callback(event)
            except Exception:  # a broken observer must not break the turn
                log.exception("event subscriber failed on %s", event.event_type)

    def next_sampling(self) -> dict[str, Any]:
        """temperature, top_p and the next request's derived seed (None: not sent);
        counts the request (:attr:`requests_sent`)."""
        s = self.settings
        seed = None
        if s.seed is not None:
            seed = request_seed(s.seed, self.requests_sent)
        self.requests_sent += 1
        return {"temperature": s.temperature, "top_p": s.top_p, "seed": seed}

    async def ask_approval(
        self, call: CheckedCall, kind: Any, summary: str, detail: str, box: list[ApprovalDecision]
    ) -> AsyncIterator[Event]:
        """The approval round trip: yields the :class:`ApprovalRequested` (answered by
        its future, or by :attr:`approver`) and its resolution, and puts the decision
        in ``box``."""
        future: asyncio.Future[ApprovalDecision] = asyncio.get_running_loop().create_future()
        request = ApprovalRequested(
            call_id=call.call_id,
            tool=call.name,
            kind=kind,
            summary=summary,
            detail=detail,
            future=future,
        )
        yield request
        if self.approver is not None and not future.done():
            decision = await self.approver(request)
        else:
            decision = await future
        box.append(decision)
        if decision.always and decision.approved and kind != "loop":
            self.permissions.always.add(call.name)
        yield ApprovalResolved(
            call_id=call.call_id,
            tool=call.name,
            approved=decision.approved,
            by=decision.by,
            reason=decision.reason,
        )

    async def compact_if_full(self, *, force: bool = False) -> AsyncIterator[Event]:
        """Compact the history when it passes ``compact_threshold`` (or ``force``); the
        events are a turn's, which the turn yields (subscribers are not told here)."""
        async for event in compact_when_needed(self, force=force):
            yield event

    async def compact_now(self, focus: str = "") -> AsyncIterator[Event]:
        """``/compact [focus]``: summarise the whole conversation now, between turns."""
        async for event in compact_when_needed(self, force=True, focus=focus, whole=True):
            self._notify(event)
            yield event

    async def summarise(self, messages: list[Message]) -> str:
        """The model's summary of ``messages`` (compaction's request: thinking closed,
        at most 1024 tokens)."""
        s = self.settings
        params = {
            **effort_params(
                placement(s.effort_placement),
                self.effort_pinned,
                s.reasoning_effort,
                thinking_closed=True,
            ),
            "max_tokens": 1024,
            **self.next_sampling(),
        }
        idle = idle_timeout_s(
            s.stream_idle_timeout_s, self.client.prefill.tok_s, self.context.estimate(messages)
        )
        async with self.client.stream_chat(messages, params=params, idle_timeout_s=idle) as stream:
            async for _ in stream:
                pass
        return stream.content


__all__ = [
    "ACT_PROMPT",
    "DEFAULT_SYSTEM_PROMPT",
    "PLAN_NOTE",
    "Agent",
    "AgentSettings",
    "Approver",
    "Subscriber",
    "empty_answer_note",
    "stop_note",
]
