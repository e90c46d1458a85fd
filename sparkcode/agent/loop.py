"""The agent loop: stream a reply, run its tool calls, repeat until it answers.

Design: :meth:`Agent.run_turn` is an async generator of
:mod:`~sparkcode.agent.events`; each event goes to every ``on_event``
subscriber (:meth:`Agent.subscribe`) just before it is yielded. Consumers
(the TUI, ``sparkcode run``) iterate; observers (the session recorder)
subscribe. Approvals: an :class:`ApprovalRequested` event carries a future;
the loop waits on it after yielding the event, so the consumer answers with
``event.respond(...)``; or give the agent an ``approver`` coroutine, which is
then asked instead (headless runs, tests).

The history (:attr:`Agent.history`) is the OpenAI message list; it is valid to
send at every point between turns (every tool call has its result), also
after an error or a cancelled turn, so nothing is lost and the user can go on.

This module is the turn: when to send, compact, retry, stop or end. One
request's stream and what watching it decides is ``_request.py``; what a reply
asks for (its calls, salvaged or read as a structured step) ``_reply.py``;
running the calls ``_execute.py``; the settings and fixed prompts ``settings.py``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from .. import config as _config
from ._calls import CheckedCall
from ._compaction import compact_when_needed
from ._execute import TurnCalls, stop_note
from ._reply import empty_answer_note, read_reply
from ._request import Request, context_overflow, forced_specs, request_params
from ._structured import results_as_user, structured_outputs, tools_prompt
from .client import ChatClient, ChatError, EngineGone
from .context import (
    ContextMeter,
    Message,
    repair_history,
)
from .events import (
    AgentError,
    ApprovalDecision,
    ApprovalRequested,
    ApprovalResolved,
    BudgetExceeded,
    Event,
    FinishReason,
    HookRan,
    Notice,
    RedoApplied,
    RequestStarted,
    SteerDelivered,
    TodoUpdated,
    TurnFinished,
    TurnStarted,
    UndoApplied,
)
from .hooks import STOP_CONTINUES, Hooks, before_prompt, blocked_reason
from .images import ImageAttachment, load_image, refuse_text_only, user_content
from .metrics import MetricsPoller
from .permissions import Permissions
from .rewind import Rewind
from .sampling import request_seed
from .settings import (
    ACT_PROMPT,
    DEFAULT_SYSTEM_PROMPT,
    PLAN_NOTE,
    TASK_REMINDER,
    AgentSettings,
)
from .tools import (
    EditChecker,
    TodoList,
    ToolContext,
    ToolRegistry,
    default_tools,
    workspace_listing,
)
from .undo import UndoError, UndoStore

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
        checker: EditChecker | None = None,
    ) -> None:
        self.client = client
        self.workspace = workspace.resolve()
        self.settings = settings or AgentSettings()
        self.permissions = permissions or Permissions(_config.Config())
        self.tools = tools or default_tools()
        self.undo_store = undo
        self.metrics = metrics
        self.approver = approver
        self.hooks = hooks
        """The session's hooks (:mod:`.hooks`); None or empty: none run."""
        self._session_started = False
        self._structured: dict[str, Any] | None = None
        self._structured_first: dict[str, Any] | None = None
        if self.settings.structured_tools:
            key = self.settings.step_name_key
            self._structured = structured_outputs(self.tools, key)
            if self.settings.first_step_tool:
                self._structured_first = structured_outputs(self.tools, key, answer=False)
            system_prompt += tools_prompt(self.tools, key)
        if self.settings.workspace_files:
            system_prompt += "\n\nThe workspace's files:\n" + workspace_listing(self.workspace)
        self.history: list[Message] = [{"role": "system", "content": system_prompt}]
        self.context = ContextMeter(limit=self.settings.context_limit)
        self.turns = 0
        """Turns in the conversation (an undone turn is not counted)."""
        self.rewind = Rewind()
        """Turn marks for /undo and /redo."""
        self.requests_sent = 0
        """Model requests of this session so far (numbers the derived seeds)."""
        self._subscribers: list[Subscriber] = []
        self._task = ""
        """The current turn's user message (``settings.task_reminder``)."""
        self._cancel = False
        self._loops: dict[str, int] = {}
        self.steering: list[str] = []
        """Messages handed to the running turn (:meth:`steer`), not delivered yet."""
        self.todos = TodoList()
        """The todo tool's list; it outlives a switch between plan and act."""
        self._ctx = ToolContext(workspace=self.workspace,
                                bash_timeout_s=self.settings.bash_timeout_s, todos=self.todos,
                                checker=checker)

    # -- public API ----------------------------------------------------------

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call ``callback`` with every event; returns a function that unsubscribes."""
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback)

    def cancel(self) -> None:
        """Stop the running turn at the next stream frame or tool boundary."""
        self._cancel = True

    def steer(self, text: str) -> None:
        """Give the running turn a user message at its next safe point: once the
        current tool calls have their results, before the next request. It is
        appended (no earlier message changes), so the request before it is the
        next one's prefix and the engine's prefix cache holds. A turn that ends
        before that point leaves it in :attr:`steering` for the caller to send."""
        self.steering.append(text)

    def take_steering(self) -> list[str]:
        """The steered messages no turn delivered (emptied)."""
        texts, self.steering = self.steering, []
        return texts

    def clear(self) -> None:
        """Forget the conversation and the todo list (the system prompt stays)."""
        self.history = self.history[:1]
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
        return load_image(full, max_bytes=self.settings.image_max_bytes,
                          name=name or str(path))

    async def run_turn(self, user_text: str,
                       images: Sequence[ImageAttachment] = ()) -> AsyncIterator[Event]:
        """Send ``user_text`` (and ``images``, as content parts) and stream the turn's
        events until TurnFinished. Images for a model without ``settings.vision``
        raise :class:`~.images.ImageError` before the history changes."""
        if images and not self.settings.vision:
            raise refuse_text_only(self.client.model)
        try:
            async for event in self._turn(user_text, tuple(images)):
                self._notify(event)
                yield event
        finally:
            repair_history(self.history)

    # -- internals -----------------------------------------------------------

    def _notify(self, event: Event) -> None:
        for callback in list(self._subscribers):
            try:
                callback(event)
            except Exception:  # a broken observer must not break the turn
                log.exception("event subscriber failed on %s", event.event_type)

    def _drop_thinking(self) -> None:
        """Earlier turns' reasoning leaves the history at a new user message.

        The model's template renders reasoning only after the last user message,
        so the rendered prompt, and the prefix cache, are the same either way;
        the request stays small and a resumed session's bodies match.
        """
        field = self.settings.thinking_field
        for i, msg in enumerate(self.history):
            if field in msg:
                self.history[i] = {k: v for k, v in msg.items() if k != field}

    def _sampling(self) -> dict[str, Any]:
        """temperature, top_p and this request's derived seed (None: not sent)."""
        s = self.settings
        seed = None
        if s.seed is not None:
            seed = request_seed(s.seed, self.requests_sent)
        self.requests_sent += 1
        return {"temperature": s.temperature, "top_p": s.top_p, "seed": seed}

    async def _turn(self, user_text: str,
                    images: tuple[ImageAttachment, ...]) -> AsyncIterator[Event]:
        self._cancel = False
        runs: list[HookRan] = []
        refused: str | None = None
        context = ""
        if self.hooks:
            source = None
            if not self._session_started:
                source = "resume" if len(self.history) > 1 else "startup"
            runs, refused, context = await before_prompt(self.hooks, user_text, source)
        self._session_started = True
        if refused is not None:
            # Nothing of this turn enters the conversation: it is as if not sent.
            yield TurnStarted(turn=self.turns + 1, user_text=user_text)
            for ran in runs:
                yield ran
            yield Notice(message=f"the prompt was not sent: a UserPromptSubmit hook blocked "
                         f"it: {refused}", code="prompt_blocked")
            yield self._finished("blocked", "", 0, 0, 0)
            return
        sent = f"{user_text}\n\n{context}" if context else user_text
        self.turns += 1
        turn = self.turns
        self._drop_thinking()
        self.rewind.begin(turn, len(self.history))
        # Plan mode is said in the user message, not the system prompt, so the
        # prompt prefix stays the same in both modes.
        planning = self.permissions.mode == "plan"
        self._task = user_text
        text = sent + PLAN_NOTE if planning else sent
        self.history.append({"role": "user", "content": user_content(text, images)})
        yield TurnStarted(turn=turn, user_text=user_text,
                          images=tuple(image.describe() for image in images))
        for ran in runs:
            yield ran
        if self.metrics is not None:
            await self.metrics.poll()  # baseline for this turn's deltas
        thinking_closed = False
        overflowed = False
        calls = TurnCalls(turn=turn, permissions=self.permissions, ctx=self._ctx,
                          undo_store=self.undo_store, ask=self._ask, record=self._tool_result,
                          snapshot_taken=self.rewind.snapshot_taken,
                          cancelled=lambda: self._cancel, hooks=self.hooks,
                          loop_nudge=self.settings.loop_nudge)
        self._loops = calls.guard.counts
        stops = 0
        prompt_total = completion_total = 0
        content = ""
        for request in range(1, self.settings.max_turns + 1):
            async for event in self._maybe_compact():
                yield event
            params = request_params(self.settings, self._sampling(),
                                    thinking_closed=thinking_closed,
                                    prompt_estimate=self.context.estimate(self.history))
            choice: Any = "auto"
            tools = self.tools.specs()
            if self._structured is not None:
                # The tools are in the system prompt; the schema is the only call format.
                tools = []
                params["structured_outputs"] = (
                    self._structured_first if request == 1 and self._structured_first
                    else self._structured)
            elif self.settings.force_tool and request == 1:
                choice = {"type": "function", "function": {"name": self.settings.force_tool}}
                tools = forced_specs(tools, self.settings)
            elif self.settings.first_step_tool and request == 1:
                choice = "required"
            yield RequestStarted(request=request, reasoning_effort=params.get("reasoning_effort"),
                                 thinking_token_budget=params.get("thinking_token_budget"),
                                 messages=len(self.history))
            outgoing = self.history
            if self._structured is not None and self.settings.results_as_user:
                outgoing = results_as_user(self.history, self.settings.step_name_key)
            req = Request(self.client, self.settings, outgoing, tools=tools, choice=choice,
                          params=params, thinking_closed=thinking_closed,
                          cancelled=lambda: self._cancel,
                          structured=self._structured is not None)
            try:
                async for event in req.events():
                    yield event
            except (ChatError, OSError) as exc:
                if context_overflow(exc) and not overflowed:
                    # The server counted more than our estimate: compact now and retry once.
                    overflowed = True
                    async for event in self._maybe_compact(force=True):
                        yield event
                    continue
                partial = req.result.content if req.result is not None else ""
                if partial:
                    self.history.append({"role": "assistant", "content": partial})
                code = "engine_gone" if isinstance(exc, EngineGone) else "request_failed"
                yield AgentError(message=f"{exc}. The conversation so far is kept; send a "
                                 "message to retry.", code=code)
                yield self._finished("error", req.shown, request, prompt_total,
                                     completion_total)
                return
            result = req.result
            assert result is not None  # set when the stream ends, also when it is cut
            prompt_total += result.stats.prompt_tokens
            completion_total += result.stats.completion_tokens
            if req.stopped_degenerate:
                # The stream was closed on the detector's verdict: keep what came
                # (the history stays valid) and end the turn saying why.
                if result.content:
                    self.history.append({"role": "assistant", "content": result.content})
                yield self._finished("degenerate", req.shown, request, prompt_total,
                                     completion_total)
                return
            if self.metrics is not None:
                update = await self.metrics.poll()
                if update is not None:
                    yield update
            if self._cancel:
                if result.content:
                    self.history.append({"role": "assistant", "content": result.content})
                yield self._finished("cancelled", req.shown, request, prompt_total,
                                     completion_total)
                return
            if result.cut and not result.tool_calls and not result.content:
                # Thinking ran past the budget: go on with thinking closed.
                yield BudgetExceeded(used=result.stats.reasoning_tokens,
                                     budget=self.settings.thinking_token_budget)
                thinking_closed = True
                continue
            reply = await read_reply(result, self.tools, self.client,
                                     structured=self._structured is not None,
                                     salvage=self.settings.salvage_calls,
                                     stamp=f"{turn}_{request}")
            if reply.notice is not None:
                yield reply.notice
            checked, content = reply.calls, reply.answer
            message: Message = {"role": "assistant", "content": reply.said}
            if checked:
                message["tool_calls"] = [c.history_entry() for c in checked]
                if self.settings.thinking_history and result.reasoning:
                    # Read back by the template within this turn only (see _turn).
                    message[self.settings.thinking_field] = result.reasoning
            self.history.append(message)
            self.context.record(result.stats.prompt_tokens, result.stats.completion_tokens,
                                len(self.history))
            if not checked:
                reason: FinishReason = "length" if result.finish_reason == "length" else "stop"
                if self.hooks and reason == "stop":
                    ended = await self.hooks.run("Stop", {"stop_hook_active": stops > 0})
                    for ran in ended:
                        yield ran
                    why = blocked_reason(ended)
                    if why is not None and stops < STOP_CONTINUES:
                        stops += 1  # bounded: a hook that always says "go on" cannot loop
                        self.history.append({"role": "user", "content": "[A Stop hook says "
                                             f"the task is not finished:]\n{why}"})
                        continue
                    if why is not None:
                        yield Notice(message=f"the Stop hooks asked {stops} times to go on; "
                                     "the turn ends here", code="stop_hook_limit")
                if not content.strip():
                    yield Notice(message=empty_answer_note(result.stats.completion_tokens),
                                 code="empty_answer")
                yield self._finished(reason, content, request, prompt_total, completion_total)
                return
            async for event in calls.run(checked):
                yield event
            if calls.stop is not None:
                yield self._finished(calls.stop, content, request, prompt_total,
                                     completion_total)
                return
            while self.steering:  # the safe point: every call has its result
                text = self.steering.pop(0)
                self.history.append({"role": "user", "content": text})
                yield SteerDelivered(text=text, request=request + 1)
        yield Notice(message=f"stopped after {self.settings.max_turns} model requests in one "
                     "turn (max_turns); send a message to let it continue", code="max_turns")
        yield self._finished("max_turns", content, self.settings.max_turns, prompt_total,
                             completion_total)

    def _finished(self, reason: FinishReason, content: str, requests: int, prompt: int,
                  completion: int) -> TurnFinished:
        return TurnFinished(reason=reason, content=content, requests=requests,
                            prompt_tokens=prompt, completion_tokens=completion,
                            loops=dict(self._loops))

    def _tool_result(self, call: CheckedCall, text: str) -> None:
        if self.settings.task_reminder:
            text += TASK_REMINDER.format(task=self._task)
        self.history.append({"role": "tool", "tool_call_id": call.call_id, "content": text})

    async def _ask(self, call: CheckedCall, kind: Any, summary: str, detail: str,
                   box: list[ApprovalDecision]) -> AsyncIterator[Event]:
        future: asyncio.Future[ApprovalDecision] = asyncio.get_running_loop().create_future()
        request = ApprovalRequested(call_id=call.call_id, tool=call.name, kind=kind,
                                    summary=summary, detail=detail, future=future)
        yield request
        if self.approver is not None and not future.done():
            decision = await self.approver(request)
        else:
            decision = await future
        box.append(decision)
        if decision.always and decision.approved and kind != "loop":
            self.permissions.always.add(call.name)
        yield ApprovalResolved(call_id=call.call_id, tool=call.name, approved=decision.approved,
                               by=decision.by, reason=decision.reason)

    async def _maybe_compact(self, *, force: bool = False) -> AsyncIterator[Event]:
        async for event in compact_when_needed(self, force=force):
            yield event

    async def compact_now(self, focus: str = "") -> AsyncIterator[Event]:
        """``/compact [focus]``: summarise the whole conversation now, between turns."""
        async for event in compact_when_needed(self, force=True, focus=focus, whole=True):
            self._notify(event)
            yield event

    async def _summarise(self, messages: list[Message]) -> str:
        params = {"reasoning_effort": "none", "max_tokens": 1024, **self._sampling()}
        async with self.client.stream_chat(messages, params=params) as stream:
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
