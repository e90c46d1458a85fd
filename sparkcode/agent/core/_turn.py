"""One turn of the conversation: when to send, compact, retry, stop or end.

:func:`turn_events` is what :meth:`Agent.run_turn <.loop.Agent.run_turn>` runs:
the hooks before the prompt, then request after request until the model answers
(or the turn must end: an error, a cancel, a degenerate stream, a refused call,
``max_turns``). One request's stream and what watching it decides is
``_request.py``; what a reply asks for (its calls, salvaged or read as a
structured step) ``_reply.py``; running the calls ``_execute.py``. The agent's
state between turns and its public API stay in ``loop.py``.

The small-model mechanisms are not here: the turn calls the conversation's
:class:`~.scaffold.Scaffold` where it takes the message, is about to send a request,
has read a reply's calls and records a call's result, and the policy's guards act
there (``scaffold/``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from ..extensions.hooks import STOP_CONTINUES, Hooks, before_prompt, blocked_reason
from ..scaffold import RequestPlan, Scaffold
from ..scaffold.attach import attachment
from ..tools import ToolContext, ToolRegistry
from ..wire.client import ChatClient, ChatError, EngineGone, StreamSilent
from ..wire.metrics import MetricsPoller
from ._execute import TurnCalls
from ._reply import empty_answer_note, read_reply
from ._request import Request, context_overflow, request_params
from .calls import CheckedCall
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
from .images import ImageAttachment, user_content
from .permissions import Permissions
from .rewind import Rewind
from .settings import AgentSettings
from .undo import UndoStore


class Conversation(Protocol):
    """What a turn reads and changes of the conversation (``loop.Agent``'s public
    surface), named here so this module does not import the loop that calls it."""

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
    tool_context: ToolContext
    scaffold: Scaffold
    session_started: bool
    loop_counts: dict[str, int]

    @property
    def cancelled(self) -> bool: ...

    def next_sampling(self) -> dict[str, Any]: ...

    def compact_if_full(self, *, force: bool = False) -> AsyncIterator[Event]: ...

    def ask_approval(
        self, call: CheckedCall, kind: Any, summary: str, detail: str, box: list[ApprovalDecision]
    ) -> AsyncIterator[Event]: ...


def drop_thinking(history: list[Message], field: str) -> None:
    """Earlier turns' reasoning leaves the history at a new user message.

    The model's template renders reasoning only after the last user message,
    so the rendered prompt, and the prefix cache, are the same either way;
    the request stays small and a resumed session's bodies match.
    """
    for i, msg in enumerate(history):
        if field in msg:
            history[i] = {k: v for k, v in msg.items() if k != field}


def say_effort(agent: Conversation) -> None:
    """Pin the conversation's effort at its first request; after that, an effort the
    history does not say yet becomes a note at its end (``effort.effort_note``)."""
    s = agent.settings
    if agent.effort_pinned is None:
        agent.effort_pinned = s.reasoning_effort
    note = effort_note(
        agent.history, placement(s.effort_placement), agent.effort_pinned, s.reasoning_effort
    )
    if note is not None:
        agent.history.append(note)


async def turn_events(
    agent: Conversation, user_text: str, images: tuple[ImageAttachment, ...]
) -> AsyncIterator[Event]:
    runs: list[HookRan] = []
    refused: str | None = None
    context = ""

    def finished(
        reason: FinishReason, content: str, requests: int, prompt: int, completion: int
    ) -> TurnFinished:
        return TurnFinished(
            reason=reason,
            content=content,
            requests=requests,
            prompt_tokens=prompt,
            completion_tokens=completion,
            loops=dict(agent.loop_counts),
        )

    if agent.hooks:
        source = None
        if not agent.session_started:
            source = "resume" if len(agent.history) > 1 else "startup"
        runs, refused, context = await before_prompt(agent.hooks, user_text, source)
    agent.session_started = True
    if refused is not None:
        # Nothing of this turn enters the conversation: it is as if not sent.
        yield TurnStarted(turn=agent.turns + 1, user_text=user_text)
        for ran in runs:
            yield ran
        yield Notice(
            message=f"the prompt was not sent: a UserPromptSubmit hook blocked it: {refused}",
            code="prompt_blocked",
        )
        yield finished("blocked", "", 0, 0, 0)
        return
    sent = f"{user_text}\n\n{context}" if context else user_text
    if agent.pending_context:  # what the user ran with !cmd, before their words
        sent = "\n\n".join([*agent.pending_context, sent])
        agent.pending_context = []
    ctx = agent.tool_context
    attached = attachment(user_text, ctx.workspace, agent.settings.attach_files)
    if attached is not None:
        sent += "\n\n" + attached.text
    agent.turns += 1
    turn = agent.turns
    drop_thinking(agent.history, agent.settings.thinking_field)
    agent.rewind.begin(turn, len(agent.history))
    say_effort(agent)  # an effort changed since the last request: said before the message
    # Plan mode is said in the user message, not the system prompt, so the
    # prompt prefix stays the same in both modes.
    planning = agent.permissions.mode == "plan"
    scaffold = agent.scaffold
    notices = scaffold.begin_turn(user_text, agent.tools, ctx)
    tools_now = scaffold.turn_tools  # a question's are narrower
    ctx.task = user_text
    text = sent + agent.permissions.plan_note if planning else sent
    agent.history.append({"role": "user", "content": user_content(text, images)})
    yield TurnStarted(
        turn=turn, user_text=user_text, images=tuple(image.describe() for image in images)
    )
    for ran in runs:
        yield ran
    if attached is not None:
        yield Notice(message=attached.describe(), code="files_attached")
    for notice in notices:
        yield notice
    if agent.metrics is not None:
        await agent.metrics.poll()  # baseline for this turn's deltas
    thinking_closed = False
    overflowed = False

    def record(call: CheckedCall, text: str, /, unfinished: bool = False) -> None:
        text = scaffold.on_tool_result(call, text, unfinished)
        agent.history.append({"role": "tool", "tool_call_id": call.call_id, "content": text})

    calls = TurnCalls(
        turn=turn,
        permissions=agent.permissions,
        ctx=ctx,
        undo_store=agent.undo_store,
        ask=agent.ask_approval,
        record=record,
        snapshot_taken=agent.rewind.snapshot_taken,
        cancelled=lambda: agent.cancelled,
        hooks=agent.hooks,
        loop_nudge=agent.settings.loop_nudge,
    )
    agent.loop_counts = calls.guard.counts
    stops = 0
    prompt_total = completion_total = 0
    content = ""
    for request in range(1, agent.settings.max_turns + 1):
        async for event in agent.compact_if_full():
            yield event
        say_effort(agent)  # changed mid-turn, or compaction took the note away
        estimate = agent.context.estimate(agent.history)
        params = request_params(
            agent.settings,
            agent.next_sampling(),
            thinking_closed=thinking_closed,
            prompt_estimate=estimate,
            pinned_effort=agent.effort_pinned,
        )
        plan = RequestPlan(
            number=request, tools=agent.tools.specs(), params=params, messages=agent.history
        )
        scaffold.before_request(plan)
        yield RequestStarted(
            request=request,
            reasoning_effort="none" if thinking_closed else agent.settings.reasoning_effort,
            thinking_token_budget=params.get("thinking_token_budget"),
            messages=len(agent.history),
        )
        req = Request(
            agent.client,
            agent.settings,
            plan.messages,
            tools=plan.tools,
            choice=plan.choice,
            params=plan.params,
            thinking_closed=thinking_closed,
            cancelled=lambda: agent.cancelled,
            structured=scaffold.steps,
            prompt_estimate=estimate,
        )
        try:
            async for event in req.events():
                yield event
        except (ChatError, OSError) as exc:
            if context_overflow(exc) and not overflowed:
                # The server counted more than our estimate: compact now and retry once.
                overflowed = True
                async for event in agent.compact_if_full(force=True):
                    yield event
                continue
            partial = req.result.content if req.result is not None else ""
            if partial:
                agent.history.append({"role": "assistant", "content": partial})
            code = (
                "engine_gone"
                if isinstance(exc, EngineGone)
                else "stream_silent"
                if isinstance(exc, StreamSilent)
                else "request_failed"
            )
            yield AgentError(
                message=f"{exc}. The conversation so far is kept; send a message to retry.",
                code=code,
            )
            yield finished("error", req.shown, request, prompt_total, completion_total)
            return
        result = req.result
        assert result is not None  # set when the stream ends, also when it is cut
        prompt_total += result.stats.prompt_tokens
        completion_total += result.stats.completion_tokens
        if req.stopped_degenerate:
            # The stream was closed on the detector's verdict: keep what came
            # (the history stays valid) and end the turn saying why.
            if result.content:
                agent.history.append({"role": "assistant", "content": result.content})
            yield finished("degenerate", req.shown, request, prompt_total, completion_total)
            return
        if agent.metrics is not None:
            update = await agent.metrics.poll()
            if update is not None:
                yield update
        if agent.cancelled:
            if result.content:
                agent.history.append({"role": "assistant", "content": result.content})
            yield finished("cancelled", req.shown, request, prompt_total, completion_total)
            return
        if result.cut and not result.tool_calls and not result.content:
            # Thinking ran past the budget: go on with thinking closed.
            yield BudgetExceeded(
                used=result.stats.reasoning_tokens, budget=agent.settings.thinking_token_budget
            )
            thinking_closed = True
            continue
        reply = await read_reply(
            result,
            tools_now,
            agent.client,
            structured=scaffold.steps,
            salvage=agent.settings.salvage_calls,
            stamp=f"{turn}_{request}",
        )
        if reply.notice is not None:
            yield reply.notice
        checked, content = reply.calls, reply.answer
        scaffold.after_reply(checked)
        message: Message = {"role": "assistant", "content": reply.said}
        if checked:
            message["tool_calls"] = [c.history_entry() for c in checked]
            if agent.settings.thinking_history and result.reasoning:
                # Read back by the template within this turn only (see drop_thinking).
                message[agent.settings.thinking_field] = result.reasoning
        agent.history.append(message)
        agent.context.record(
            result.stats.prompt_tokens, result.stats.completion_tokens, len(agent.history)
        )
        if not checked:
            reason: FinishReason = "length" if result.finish_reason == "length" else "stop"
            if agent.hooks and reason == "stop":
                ended = await agent.hooks.run("Stop", {"stop_hook_active": stops > 0})
                for ran in ended:
                    yield ran
                why = blocked_reason(ended)
                if why is not None and stops < STOP_CONTINUES:
                    stops += 1  # bounded: a hook that always says "go on" cannot loop
                    agent.history.append(
                        {
                            "role": "user",
                            "content": f"[A Stop hook says the task is not finished:]\n{why}",
                        }
                    )
                    continue
                if why is not None:
                    yield Notice(
                        message=f"the Stop hooks asked {stops} times to go on; the turn ends here",
                        code="stop_hook_limit",
                    )
            if not content.strip():
                yield Notice(
                    message=empty_answer_note(result.stats.completion_tokens), code="empty_answer"
                )
            yield finished(reason, content, request, prompt_total, completion_total)
            return
        async for event in calls.run(checked):
            yield event
        if calls.stop is not None:
            yield finished(calls.stop, content, request, prompt_total, completion_total)
            return
        while agent.steering:  # the safe point: every call has its result
            text = agent.steering.pop(0)
            agent.history.append({"role": "user", "content": text})
            yield SteerDelivered(text=text, request=request + 1)
    yield Notice(
        message=f"stopped after {agent.settings.max_turns} model requests in one "
        "turn (max_turns); send a message to let it continue",
        code="max_turns",
    )
    yield finished("max_turns", content, agent.settings.max_turns, prompt_total, completion_total)
