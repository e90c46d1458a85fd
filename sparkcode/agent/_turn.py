"""One turn of the conversation: when to send, compact, retry, stop or end.

:func:`turn_events` is what :meth:`Agent.run_turn <.loop.Agent.run_turn>` runs:
the hooks before the prompt, then request after request until the model answers
(or the turn must end: an error, a cancel, a degenerate stream, a refused call,
``max_turns``). One request's stream and what watching it decides is
``_request.py``; what a reply asks for (its calls, salvaged or read as a
structured step) ``_reply.py``; running the calls ``_execute.py``. The agent's
state between turns and its public API stay in ``loop.py``.

It was ``Agent._turn``; it keeps ``self`` for the agent so the move from
``loop.py`` is line for line (``git diff --color-moved`` shows it unchanged).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from ._calls import CheckedCall
from ._execute import TurnCalls
from ._reply import empty_answer_note, read_reply
from ._request import Request, context_overflow, forced_specs, request_params
from ._structured import results_as_user, structured_outputs
from .attach import attachment
from .client import ChatClient, ChatError, EngineGone, StreamSilent
from .context import ContextMeter, Message
from .effort import effort_note, placement
from .events import (
    AgentError,
    ApprovalDecision,
    BudgetExceeded,
    Event,
    FinishReason,
    HookRan,
    Notice,
    RequestStarted,
    SteerDelivered,
    TurnFinished,
    TurnStarted,
)
from .hooks import STOP_CONTINUES, Hooks, before_prompt, blocked_reason
from .images import ImageAttachment, user_content
from .metrics import MetricsPoller
from .permissions import Permissions
from .questions import asks_a_run, files_to_change, is_question, kept_files
from .rewind import Rewind
from .settings import AgentSettings
from .tools import ToolContext, ToolRegistry
from .undo import UndoStore

QUESTION_LEAVES_OUT = frozenset({"edit"})
"""The tool kinds a question turn is not offered (write_file, edit_file, multi_edit)."""
QUESTION_REFUSAL = ("this message only asks, so no file is changed this turn ([agent] "
                    "questions_read_only); answer the question, or say what change the "
                    "user would have to ask for")
"""The result of an edit call in a question turn when the tools are the API's: they stay
in the tool list (the template renders it before the history, docs/agent.md "Prefix
stability"), so such a call is refused by name instead."""
RUN_BEFORE_ANSWER_REQUESTS = 4
"""With ``run_before_answer``, the requests of a turn that may not answer while the run
it asks for is still to be made: enough for a read, an edit and the run; after them the
model may answer (a turn that cannot run anything must still end)."""


class Agent(Protocol):
    """What a turn reads and changes of the agent (``loop.Agent``), named here so this
    module does not import the loop that calls it."""

    client: ChatClient
    settings: AgentSettings
    permissions: Permissions
    tools: ToolRegistry
    hooks: Hooks | None
    metrics: MetricsPoller | None
    undo_store: UndoStore | None
    history: list[Message]
    effort_pinned: str | None
    context: ContextMeter
    rewind: Rewind
    turns: int
    steering: list[str]
    pending_context: list[str]
    _ctx: ToolContext
    _cancel: bool
    _loops: dict[str, int]
    _session_started: bool
    _structured: dict[str, Any] | None
    _structured_first: dict[str, Any] | None
    _question: bool
    _runs_asked: bool
    _run_pending: bool
    _to_change: tuple[str, ...]
    _changed: set[str]

    def _drop_thinking(self) -> None: ...

    def _sampling(self) -> dict[str, Any]: ...

    def _maybe_compact(self, *, force: bool = False) -> AsyncIterator[Event]: ...

    def _finished(self, reason: FinishReason, content: str, requests: int, prompt: int,
                  completion: int) -> TurnFinished: ...

    def _tool_result(self, call: CheckedCall, text: str, /,
                     unfinished: bool = False) -> None: ...

    def _ask(self, call: CheckedCall, kind: Any, summary: str, detail: str,
             box: list[ApprovalDecision]) -> AsyncIterator[Event]: ...


def say_effort(self: Agent) -> None:
    """Pin the conversation's effort at its first request; after that, an effort the
    history does not say yet becomes a note at its end (``effort.effort_note``)."""
    s = self.settings
    if self.effort_pinned is None:
        self.effort_pinned = s.reasoning_effort
    note = effort_note(self.history, placement(s.effort_placement), self.effort_pinned,
                       s.reasoning_effort)
    if note is not None:
        self.history.append(note)


async def turn_events(self: Agent, user_text: str,
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
    if self.pending_context:  # what the user ran with !cmd, before their words
        sent = "\n\n".join([*self.pending_context, sent])
        self.pending_context = []
    attached = attachment(user_text, self._ctx.workspace, self.settings.attach_files)
    if attached is not None:
        sent += "\n\n" + attached.text
    self.turns += 1
    turn = self.turns
    self._drop_thinking()
    self.rewind.begin(turn, len(self.history))
    say_effort(self)  # an effort changed since the last request: said before the message
    # Plan mode is said in the user message, not the system prompt, so the
    # prompt prefix stays the same in both modes.
    planning = self.permissions.mode == "plan"
    self._question = self.settings.questions_read_only and is_question(user_text)
    self._runs_asked = self._run_pending = asks_a_run(user_text)
    told_kept = kept_files(user_text)
    kept = told_kept if self.settings.keep_told_files else None
    self._to_change = tuple(name for name in files_to_change(user_text)
                            if told_kept.why(name) is None)
    self._changed = set()
    self._ctx.kept = kept or None
    self._ctx.task = user_text
    tools_now, structured, structured_first = (self.tools, self._structured,
                                               self._structured_first)
    if self._question:  # the edit tools out of the grammar, or refused (the prompt is
        tools_now = self.tools.without_kinds(QUESTION_LEAVES_OUT)  # unchanged either way)
        if structured is not None:
            key = self.settings.step_name_key
            structured = structured_outputs(tools_now, key)
            if structured_first is not None:
                structured_first = structured_outputs(tools_now, key, answer=False)
    text = sent + self.permissions.plan_note if planning else sent
    self.history.append({"role": "user", "content": user_content(text, images)})
    yield TurnStarted(turn=turn, user_text=user_text,
                      images=tuple(image.describe() for image in images))
    for ran in runs:
        yield ran
    if attached is not None:
        yield Notice(message=attached.describe(), code="files_attached")
    if kept:
        yield Notice(message=kept.describe(), code="files_kept")
    if self._question:
        yield Notice(message="this message only asks, so the tools that edit files are left "
                     "out of this turn ([agent] questions_read_only); ask for a change to "
                     "have one made", code="question_read_only")
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
        say_effort(self)  # changed mid-turn, or compaction took the note away
        estimate = self.context.estimate(self.history)
        params = request_params(self.settings, self._sampling(),
                                thinking_closed=thinking_closed,
                                prompt_estimate=estimate, pinned_effort=self.effort_pinned)
        choice: Any = "auto"
        # The whole list always: the template renders it before the history, so a
        # question turn's narrower list would break the cached prefix.
        tools = self.tools.specs()
        run_first = self.settings.run_before_answer and self._run_pending \
            and request <= RUN_BEFORE_ANSWER_REQUESTS
        if structured is not None:
            # The tools are in the system prompt; the schema is the only call format.
            tools = []
            if run_first:
                structured_first = structured_first or structured_outputs(
                    tools_now, self.settings.step_name_key, answer=False)
            params["structured_outputs"] = (
                structured_first if (request == 1 or run_first) and structured_first
                else structured)
        elif self.settings.force_tool and request == 1:
            choice = {"type": "function", "function": {"name": self.settings.force_tool}}
            tools = forced_specs(tools, self.settings)
        elif self.settings.first_step_tool and request == 1 or run_first:
            choice = "required"
        yield RequestStarted(request=request, reasoning_effort="none" if thinking_closed
                             else self.settings.reasoning_effort,
                             thinking_token_budget=params.get("thinking_token_budget"),
                             messages=len(self.history))
        outgoing = self.history
        if self._structured is not None and self.settings.results_as_user:
            outgoing = results_as_user(self.history, self.settings.step_name_key)
        req = Request(self.client, self.settings, outgoing, tools=tools, choice=choice,
                      params=params, thinking_closed=thinking_closed,
                      cancelled=lambda: self._cancel,
                      structured=self._structured is not None, prompt_estimate=estimate)
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
            code = "engine_gone" if isinstance(exc, EngineGone) else \
                "stream_silent" if isinstance(exc, StreamSilent) else "request_failed"
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
        reply = await read_reply(result, tools_now, self.client,
                                 structured=self._structured is not None,
                                 salvage=self.settings.salvage_calls,
                                 stamp=f"{turn}_{request}")
        if reply.notice is not None:
            yield reply.notice
        checked, content = reply.calls, reply.answer
        if self._question and structured is None:
            for call in checked:
                if call.tool is None and self.tools.get(call.name) is not None:
                    call.error = QUESTION_REFUSAL
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

