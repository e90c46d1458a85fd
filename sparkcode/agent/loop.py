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
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import config as _config
from ..detect import DegenerationDetector
from ._calls import CheckedCall, check_call
from ._execute import execute_call
from ._salvage import Outcome, recover
from ._structured import read_step, structured_outputs, tools_prompt
from .client import ChatClient, ChatError, ChatResult, EngineGone, ToolCall
from .context import ContextMeter, Message, compact, last_user_index
from .events import (
    AgentError,
    ApprovalDecision,
    ApprovalRequested,
    ApprovalResolved,
    BudgetExceeded,
    ContentDelta,
    ContextCompacted,
    DegenerationDetected,
    Event,
    FinishReason,
    Notice,
    ReasoningDelta,
    RedoApplied,
    RequestStarted,
    SnapshotTaken,
    TodoUpdated,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
    TurnStarted,
    UndoApplied,
    UsageUpdate,
)
from .metrics import MetricsPoller
from .permissions import Permissions
from .rewind import Rewind
from .sampling import request_seed
from .tools import TodoList, ToolContext, ToolRegistry, default_tools
from .undo import UndoError, UndoStore

log = logging.getLogger(__name__)

Approver = Callable[[ApprovalRequested], Awaitable[ApprovalDecision]]
Subscriber = Callable[[Event], None]

DEFAULT_SYSTEM_PROMPT = (
    "You are sparkcode, a coding agent working in a software project (the workspace). Use "
    "the tools to inspect and change it: paths are relative to the workspace root. Read a "
    "file before editing it; edit_file needs old_string to match exactly once. Prefer small, "
    "correct changes and check them (run the tests when there are some). When you are done, "
    "reply with a short summary of what you changed."
)
PLAN_NOTE = (
    "\n\n[Plan mode: only read-only tools run. Investigate, record the steps of the change "
    "with the todo tool (action add), then answer with the plan. Nothing is changed until "
    "the user approves the plan.]"
)
"""Appended to the user's message while the permission mode is ``plan``."""
ACT_PROMPT = ("The plan is approved: carry it out now, step by step, marking each todo item "
              "in_progress and then done as you go.")
"""What switching from plan to act sends (the TUI's /act)."""
LOOP_REPEATS = 3
"""Identical consecutive tool calls that stop the loop and ask the user."""


@dataclass
class AgentSettings:
    """Per-session knobs; the TUI's /effort, /budget, /approve change them live."""

    reasoning_effort: str = "low"
    """Sent with every request (GLM-5.3-Flash treats a missing value as max)."""
    thinking_token_budget: int = 1536
    """Sent with every request; -1 = unlimited (not sent)."""
    budget_margin: int = 64
    """Tokens past the budget tolerated before the client cuts the stream."""
    max_turns: int = 50
    """Model requests per user message."""
    max_tokens: int | None = None
    temperature: float | None = None
    """None: the server's default."""
    top_p: float | None = None
    seed: int | None = None
    """The session seed; every request sends ``seed`` derived from it and the
    request's number (:func:`~.sampling.request_seed`). None: no seed is sent."""
    thinking_history: bool = False
    """Within a turn's tool loop, send each assistant message's reasoning back
    (in ``thinking_field``); earlier turns' reasoning is dropped, as GLM-5.x's
    template does itself."""
    thinking_field: str = "reasoning_content"
    """The assistant-message field the server's chat template reads reasoning from."""
    force_tool: str | None = None
    """Name a tool in ``tool_choice`` on the first request of each turn, marked
    ``strict`` so vLLM constrains the arguments to its schema; for scripted runs."""
    force_tool_parameters: dict[str, Any] | None = None
    """A narrower JSON schema for the forced call's arguments. vLLM's grammar for
    the call allows any whitespace inside the arguments, so a random model may
    pad them until max_tokens; a model that writes JSON is held to the schema."""
    context_limit: int | None = None
    """The engine's max_model_len (from /v1/models)."""
    compact_threshold: float = 0.8
    bash_timeout_s: float = 120.0
    usage_interval_s: float = 0.1
    """Least time between two :class:`UsageUpdate` events of one stream."""
    degenerate: _config.DegenerateMode = "stop"
    """What a degenerate stream (``sparkcode.detect``) does: ``stop`` closes it and
    ends the turn, ``warn`` only reports it, ``off`` does not watch."""
    structured_tools: bool = False
    """Small-model mode (``_structured``): tools described in the system prompt,
    every reply one JSON step held to the tools' schemas by the engine."""
    salvage_calls: bool = True
    """Recover tool calls the server's parser did not return (``_salvage``)."""
    held_back_max_prompt: int = 32768
    """Ask vLLM for token ids (``return_token_ids``, to recover calls its streaming
    parser swallowed) only while the prompt is estimated below this many tokens:
    vLLM then also returns the prompt's ids in the first frame."""


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
    ) -> None:
        self.client = client
        self.workspace = workspace.resolve()
        self.settings = settings or AgentSettings()
        self.permissions = permissions or Permissions(_config.Config())
        self.tools = tools or default_tools()
        self.undo_store = undo
        self.metrics = metrics
        self.approver = approver
        self._structured: dict[str, Any] | None = None
        if self.settings.structured_tools:
            self._structured = structured_outputs(self.tools)
            system_prompt += tools_prompt(self.tools)
        self.history: list[Message] = [{"role": "system", "content": system_prompt}]
        self.context = ContextMeter(limit=self.settings.context_limit)
        self.turns = 0
        """Turns in the conversation (an undone turn is not counted)."""
        self.rewind = Rewind()
        """Turn marks for /undo and /redo."""
        self.requests_sent = 0
        """Model requests of this session so far (numbers the derived seeds)."""
        self._subscribers: list[Subscriber] = []
        self._cancel = False
        self._degenerate: DegenerationDetected | None = None
        self.todos = TodoList()
        """The todo tool's list; it outlives a switch between plan and act."""
        self._ctx = ToolContext(workspace=self.workspace,
                                bash_timeout_s=self.settings.bash_timeout_s, todos=self.todos)

    # -- public API ----------------------------------------------------------

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call ``callback`` with every event; returns a function that unsubscribes."""
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback)

    def cancel(self) -> None:
        """Stop the running turn at the next stream frame or tool boundary."""
        self._cancel = True

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

    async def run_turn(self, user_text: str) -> AsyncIterator[Event]:
        """Send ``user_text`` and stream the turn's events until TurnFinished."""
        try:
            async for event in self._turn(user_text):
                self._notify(event)
                yield event
        finally:
            self._repair_history()

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

    def _repair_history(self) -> None:
        """Give every tool call in the history a result (an interrupted turn may
        leave some without), so the next request is valid."""
        answered = {m.get("tool_call_id") for m in self.history if m.get("role") == "tool"}
        i = 0
        while i < len(self.history):
            msg = self.history[i]
            i += 1
            for call in msg.get("tool_calls") or []:
                if call["id"] not in answered:
                    self.history.insert(i, {"role": "tool", "tool_call_id": call["id"],
                                            "content": "not run: the turn was interrupted"})
                    answered.add(call["id"])
                    i += 1

    def _sampling(self) -> dict[str, Any]:
        """temperature, top_p and this request's derived seed (None: not sent)."""
        s = self.settings
        seed = None
        if s.seed is not None:
            seed = request_seed(s.seed, self.requests_sent)
        self.requests_sent += 1
        return {"temperature": s.temperature, "top_p": s.top_p, "seed": seed}

    def _params(self, thinking_closed: bool) -> dict[str, Any]:
        s = self.settings
        params: dict[str, Any] = {"max_tokens": s.max_tokens, **self._sampling()}
        if s.salvage_calls and self.context.estimate(self.history) < s.held_back_max_prompt:
            params["return_token_ids"] = True
        if thinking_closed:
            params["reasoning_effort"] = "none"
        else:
            params["reasoning_effort"] = s.reasoning_effort
            if s.thinking_token_budget >= 0:
                params["thinking_token_budget"] = s.thinking_token_budget
        return params

    async def _turn(self, user_text: str) -> AsyncIterator[Event]:
        self._cancel = False
        self.turns += 1
        turn = self.turns
        self._drop_thinking()
        self.rewind.begin(turn, len(self.history))
        # Plan mode is said in the user message, not the system prompt, so the
        # prompt prefix stays the same in both modes.
        planning = self.permissions.mode == "plan"
        self.history.append({"role": "user",
                             "content": user_text + PLAN_NOTE if planning else user_text})
        yield TurnStarted(turn=turn, user_text=user_text)
        if self.metrics is not None:
            await self.metrics.poll()  # baseline for this turn's deltas
        thinking_closed = False
        overflowed = False
        snapshot_done = False
        last_sig, repeats = "", 0
        prompt_total = completion_total = 0
        content = ""
        for request in range(1, self.settings.max_turns + 1):
            async for event in self._maybe_compact():
                yield event
            params = self._params(thinking_closed)
            choice: Any = "auto"
            tools = self.tools.specs()
            if self._structured is not None:
                # The tools are in the system prompt; the schema is the only call format.
                tools = []
                params["structured_outputs"] = self._structured
            elif self.settings.force_tool and request == 1:
                choice = {"type": "function", "function": {"name": self.settings.force_tool}}
                tools = self._forced_specs(tools)
            yield RequestStarted(request=request, reasoning_effort=params.get("reasoning_effort"),
                                 thinking_token_budget=params.get("thinking_token_budget"),
                                 messages=len(self.history))
            box: list[ChatResult] = []
            try:
                async for event in self._stream(params, tools, choice, thinking_closed, box):
                    yield event
            except (ChatError, OSError) as exc:
                if _context_overflow(exc) and not overflowed:
                    # The server counted more than our estimate: compact now and retry once.
                    overflowed = True
                    async for event in self._maybe_compact(force=True):
                        yield event
                    continue
                partial = box[0].content if box else ""
                if partial:
                    self.history.append({"role": "assistant", "content": partial})
                code = "engine_gone" if isinstance(exc, EngineGone) else "request_failed"
                yield AgentError(message=f"{exc}. The conversation so far is kept; send a "
                                 "message to retry.", code=code)
                yield self._finished("error", partial, request, prompt_total, completion_total)
                return
            result = box[0]
            prompt_total += result.stats.prompt_tokens
            completion_total += result.stats.completion_tokens
            if self._degenerate is not None and self._degenerate.stopped:
                # The stream was closed on the detector's verdict: keep what came
                # (the history stays valid) and end the turn saying why.
                if result.content:
                    self.history.append({"role": "assistant", "content": result.content})
                yield self._finished("degenerate", result.content, request, prompt_total,
                                     completion_total)
                return
            if self.metrics is not None:
                update = await self.metrics.poll()
                if update is not None:
                    yield update
            if self._cancel:
                if result.content:
                    self.history.append({"role": "assistant", "content": result.content})
                yield self._finished("cancelled", result.content, request, prompt_total,
                                     completion_total)
                return
            if result.cut and not result.tool_calls and not result.content:
                # Thinking ran past the budget: go on with thinking closed.
                yield BudgetExceeded(used=result.stats.reasoning_tokens,
                                     budget=self.settings.thinking_token_budget)
                thinking_closed = True
                continue
            checked = [check_call(c, self.tools) for c in result.tool_calls]
            content = result.content
            said = content
            step = read_step(content) if self._structured is not None and not checked else None
            if step is not None:
                # The step stays in the history as written (well-formed by construction).
                if step.answer is not None:
                    content = step.answer
                else:
                    checked = [check_call(ToolCall(
                        index=0, id=f"step_{turn}_{request}", name=step.tool or "",
                        arguments=step.arguments), self.tools)]
            elif not checked and self.settings.salvage_calls and not result.cut:
                found = await self._salvage(result)
                if found is not None:
                    yield Notice(message=found.notice(), code="tool_call_salvaged"
                                 if found.calls else "tool_call_unreadable")
                    checked, content = self._salvaged_calls(found, request), found.content
                    said = content
            message: Message = {"role": "assistant", "content": said}
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
                if not content.strip():
                    yield Notice(message=empty_answer_note(result.stats.completion_tokens),
                                 code="empty_answer")
                yield self._finished(reason, content, request, prompt_total, completion_total)
                return
            stop: FinishReason | None = None
            for call in checked:
                if stop is not None:
                    self._tool_result(call, f"not run: {stop_note(stop)}")
                    continue
                yield ToolCallStarted(call_id=call.call_id, name=call.name, arguments=call.args,
                                      raw_arguments=call.raw_arguments)
                repeats = repeats + 1 if call.signature == last_sig else 1
                last_sig = call.signature
                if repeats >= LOOP_REPEATS:
                    box_d: list[ApprovalDecision] = []
                    async for event in self._ask(call, "loop",
                                                 f"{call.name} was called {repeats} times in a "
                                                 "row with the same arguments; continue?",
                                                 call.history_arguments, box_d):
                        yield event
                    if not box_d[0].approved:
                        stop = "loop"
                        msg = "stopped: the same call was repeated; the user was asked"
                        self._tool_result(call, msg)
                        yield ToolCallFinished(call_id=call.call_id, name=call.name, result=msg,
                                               error=msg)
                        continue
                    repeats = 0
                todos_before = self.todos.items
                async for event in execute_call(
                        call, permissions=self.permissions, ctx=self._ctx,
                        undo_store=self.undo_store, turn=turn, snapshot_done=snapshot_done,
                        ask=self._ask, record=self._tool_result):
                    if isinstance(event, SnapshotTaken):
                        snapshot_done = True
                        self.rewind.snapshot_taken(event.snapshot)
                    if isinstance(event, ApprovalResolved) and not event.approved \
                            and event.by == "user":
                        stop = "denied"
                    yield event
                if self.todos.items != todos_before:
                    yield TodoUpdated(items=self.todos.items)
                if self._cancel:
                    stop = "cancelled"
            if stop is not None:
                yield self._finished(stop, content, request, prompt_total, completion_total)
                return
        yield Notice(message=f"stopped after {self.settings.max_turns} model requests in one "
                     "turn (max_turns); send a message to let it continue", code="max_turns")
        yield self._finished("max_turns", content, self.settings.max_turns, prompt_total,
                             completion_total)

    async def _salvage(self, result: ChatResult) -> Outcome | None:
        hidden = None
        if result.hidden_token_ids and not result.content.strip():
            hidden = await self.client.detokenize(result.hidden_token_ids)
        return recover(result.content, result.reasoning, hidden, self.tools)

    def _salvaged_calls(self, found: Outcome, request: int) -> list[CheckedCall]:
        stamp = f"{self.turns}_{request}"
        checked = [check_call(ToolCall(index=i, id=f"salvaged_{stamp}_{i}", name=c.name,
                                       arguments=c.arguments), self.tools)
                   for i, c in enumerate(found.calls)]
        for j, bad in enumerate(found.unreadable, len(checked)):
            checked.append(CheckedCall(
                call_id=f"salvaged_{stamp}_{j}", name=bad.name or "invalid", raw_arguments="",
                args={}, history_arguments="{}",
                error=f"{bad.problem}; nothing was run. Call the tool again, well-formed"))
        return checked

    def _finished(self, reason: FinishReason, content: str, requests: int, prompt: int,
                  completion: int) -> TurnFinished:
        return TurnFinished(reason=reason, content=content, requests=requests,
                            prompt_tokens=prompt, completion_tokens=completion)

    def _tool_result(self, call: CheckedCall, text: str) -> None:
        self.history.append({"role": "tool", "tool_call_id": call.call_id, "content": text})

    def _forced_specs(self, specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # vLLM (0.32, hermes and other structural-tag parsers) constrains only
        # the call envelope of a named tool_choice; the arguments follow the
        # tool's schema only when the tool is marked strict (measured: without
        # it a random model's arguments came back as `true`).
        schema = self.settings.force_tool_parameters
        out = []
        for spec in specs:
            if spec["function"]["name"] == self.settings.force_tool:
                function = {**spec["function"], "strict": True}
                if schema is not None:
                    function["parameters"] = schema
                spec = {**spec, "function": function}
            out.append(spec)
        return out

    async def _stream(self, params: dict[str, Any], tools: list[dict[str, Any]], choice: Any,
                      thinking_closed: bool, box: list[ChatResult]) -> AsyncIterator[Event]:
        """One streamed request; its result is put in ``box`` (also when cut)."""
        s = self.settings
        budget = s.thinking_token_budget if not thinking_closed and \
            s.thinking_token_budget >= 0 else None
        limit = budget + max(s.budget_margin, 0) if budget is not None else None
        stream = self.client.stream_chat(self.history, tools=tools, tool_choice=choice,
                                         params=params)
        last_usage = 0.0
        self._degenerate = None
        watch = s.degenerate != "off"
        detectors = {"content": DegenerationDetector(), "reasoning": DegenerationDetector()}
        try:
            async with stream:
                for note in stream.notices:
                    yield Notice(message=note, code="request_field_dropped")
                stats = stream.stats
                answered = False
                async for delta in stream:
                    if delta.reasoning:
                        yield ReasoningDelta(text=delta.reasoning,
                                             tokens_so_far=stats.reasoning_tokens, budget=budget)
                    if delta.content:
                        answered = True
                        yield ContentDelta(text=delta.content)
                    if delta.tool_calls:
                        answered = True
                    if delta.usage and time.monotonic() - last_usage >= s.usage_interval_s:
                        last_usage = time.monotonic()
                        yield self._usage(stream.stats, final=False)
                    if watch and self._degenerate is None:
                        fired = self._watch(detectors, delta.content, delta.reasoning)
                        if fired is not None:
                            yield fired
                            if fired.stopped:
                                break
                    if self._cancel:
                        break
                    if limit is not None and not answered and stats.reasoning_tokens > limit:
                        break
        finally:
            box.append(stream.result())
        yield self._usage(stream.stats, final=True)

    def _watch(self, detectors: dict[str, DegenerationDetector], content: str,
               reasoning: str) -> DegenerationDetected | None:
        for channel, text in (("reasoning", reasoning), ("content", content)):
            if not text:
                continue
            detector = detectors[channel]
            verdict = detector.feed(text)
            if verdict is not None and verdict.degenerate:
                self._degenerate = DegenerationDetected(
                    channel=channel, pattern=verdict.pattern,  # type: ignore[arg-type]
                    detail=verdict.detail, chars=detector.chars_seen,
                    stopped=self.settings.degenerate == "stop")
                return self._degenerate
        return None

    def _usage(self, stats: Any, *, final: bool) -> UsageUpdate:
        return UsageUpdate(
            prompt_tokens=stats.prompt_tokens, completion_tokens=stats.completion_tokens,
            reasoning_tokens=stats.reasoning_tokens, ttft_s=stats.ttft_s,
            decode_tok_s=stats.decode_tok_s, prefill_tok_s=stats.prefill_tok_s,
            context_used=stats.prompt_tokens + stats.completion_tokens,
            context_limit=self.settings.context_limit, cached_tokens=stats.cached_tokens,
            final=final,
        )

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
                               by="user", reason=decision.reason)

    async def _maybe_compact(self, *, force: bool = False) -> AsyncIterator[Event]:
        limit = self.settings.context_limit
        if not limit and not force:
            return
        used = self.context.estimate(self.history)
        if not force and used < self.settings.compact_threshold * (limit or 0):
            return
        limit = limit or used
        new, count = await compact(self.history, self._summarise, limit_chars=limit * 2)
        if count == 0:
            yield Notice(message=f"the context is nearly full ({used} of {limit} tokens) and "
                         "there is nothing older to compact; consider /clear",
                         code="context_full")
            return
        self.history = new
        self.rewind.compacted(self.turns, last_user_index(new))
        from .context import estimate_tokens

        after = estimate_tokens(new)
        self.context = ContextMeter(limit=limit)
        yield ContextCompacted(tokens_before=used, tokens_after_estimate=after,
                               messages_summarised=count)

    async def _summarise(self, messages: list[Message]) -> str:
        params = {"reasoning_effort": "none", "max_tokens": 1024, **self._sampling()}
        async with self.client.stream_chat(messages, params=params) as stream:
            async for _ in stream:
                pass
        return stream.content


def _context_overflow(exc: BaseException) -> bool:
    """HTTP 400 saying the prompt does not fit (vLLM, OpenAI and llama.cpp wordings)."""
    text = str(exc).lower()
    return isinstance(exc, ChatError) and exc.status == 400 and (
        "context length" in text or "context window" in text or "maximum context" in text
        or "too many tokens" in text or "exceeds the available context" in text)


def stop_note(reason: str) -> str:
    return {
        "denied": "an earlier call in this step was declined by the user",
        "loop": "the loop was stopped after repeated identical calls",
        "cancelled": "the turn was cancelled",
    }.get(reason, "the turn ended")


def empty_answer_note(completion_tokens: int) -> str:
    """Why a turn ended with neither text nor a tool call, and what to do."""
    if completion_tokens <= 0:
        return "the model returned an empty answer; send a message to retry"
    return (f"the model generated {completion_tokens} tokens but the server streamed no text "
            "and no tool call (a server-side tool-call parser drops a call it cannot parse, "
            "as vLLM's does when streaming); nothing was done: retry, or rephrase")
