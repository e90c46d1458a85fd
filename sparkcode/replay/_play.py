"""Play a recorded session back through the agent's own stream parser.

The recorded response bytes are read at their recorded pace (divided by
``speed``, :func:`recorded_reads`) by the agent's :class:`StreamParser`, and the
real TUI renderer draws what it yields: what appears is what the user saw,
rebuilt from the bytes, with no engine and no client. Recorded agent events (tool calls,
results, approvals, undo, the degeneration detector's verdict) are replayed
between requests at their recorded times: nothing re-watches the stream.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Any

from sparkcode.agent.core import events as ev
from sparkcode.agent.core.images import content_text
from sparkcode.agent.scaffold.step_text import StepText
from sparkcode.agent.wire.client import (
    ChatError,
    EngineGone,
    StreamParser,
    error_text,
    json_or_text,
)
from sparkcode.sessions import Exchange, Session, SessionEvent, is_model_call

MAX_GAP_S = 3.0
"""Idle gaps longer than this (the user thinking, a slow tool) are shortened to it."""

PLAYED_EVENTS: frozenset[str] = frozenset(
    {
        "TurnStarted",
        "ToolCallStarted",
        "ToolCallFinished",
        "ApprovalResolved",
        "BudgetExceeded",
        "Notice",
        "SnapshotTaken",
        "UndoApplied",
        "ContextCompacted",
        "AgentError",
        "TurnFinished",
        "MetricsUpdate",
        "TodoUpdated",
        "SteerDelivered",
        "HookRan",
        "DegenerationDetected",
        "TaskEvent",
    }
)


async def recorded_reads(
    exchange: Exchange, speed: float, *, url: str = "recorded"
) -> AsyncIterator[bytes]:
    """The recorded response body's reads, spaced as recorded divided by ``speed``
    (0: at once; gaps over :data:`MAX_GAP_S` shortened to it). A recorded failure
    raises what the client raised: no response is :class:`EngineGone`, an HTTP
    error a :class:`ChatError` naming ``url`` and the server's message."""
    if exchange.status is None:
        raise EngineGone(
            f"cannot reach {url}: {exchange.error or 'the recorded request got no response'}"
        )
    if exchange.status >= 400:
        message = error_text(json_or_text(exchange.response_bytes.decode("utf-8", "replace")))
        raise ChatError(f"HTTP {exchange.status} from {url}: {message}", status=exchange.status)
    previous = exchange.response_t_ns or exchange.t_ns
    for chunk in exchange.chunks:
        if speed > 0:
            gap = max(0, chunk.t_ns - previous) / 1e9 / speed
            if gap > 0:
                await asyncio.sleep(min(gap, MAX_GAP_S))
        previous = chunk.t_ns
        yield chunk.data


def event_from_record(record: SessionEvent) -> ev.Event | None:
    """Rebuild an agent event from its recorded JSON (None for unknown kinds)."""
    if record.type not in PLAYED_EVENTS:
        return None
    if record.type == "TaskEvent":
        return _task_event(record)
    cls = getattr(ev, record.type, None)
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        return None
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in record.data:
            value = record.data[f.name]
            if cls is ev.TodoUpdated and f.name == "items":
                value = todo_items(value)
            kwargs[f.name] = tuple(value) if isinstance(value, list) else value
    try:
        event = cls(**kwargs)
    except TypeError:
        return None
    return event if isinstance(event, ev.Event) else None


def _task_event(record: SessionEvent) -> ev.TaskEvent | None:
    """A recorded ``TaskEvent``: its inner event rebuilt as a record of its own."""
    data, call_id = record.data.get("event"), record.data.get("call_id")
    if (
        not isinstance(data, dict)
        or not isinstance(call_id, str)
        or data.get("type") in (None, "TaskEvent")
    ):
        return None
    inner = event_from_record(
        SessionEvent(
            t_ns=record.t_ns,
            type=str(data["type"]),
            data={k: v for k, v in data.items() if k != "type"},
        )
    )
    return ev.TaskEvent(call_id=call_id, event=inner) if inner is not None else None


def todo_items(value: object) -> list[ev.TodoItem]:
    """A recorded ``TodoUpdated``'s items; entries that are not well-formed are left out."""
    items = []
    for item in value if isinstance(value, list) else []:
        if not isinstance(item, dict):
            continue
        item_id, text, status = item.get("id"), item.get("text"), item.get("status", "pending")
        if (
            isinstance(item_id, int)
            and not isinstance(item_id, bool)
            and isinstance(text, str)
            and status in ev.TODO_STATUSES
        ):
            items.append(ev.TodoItem(id=item_id, text=text, status=status))
    return items


def _last_user_text(body: dict[str, Any]) -> str | None:
    for message in reversed(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            return content_text(content)  # images as [image: PNG WxH], not base64
    return None


async def _pause(gap_ns: int, speed: float) -> None:
    if speed > 0 and gap_ns > 0:
        await asyncio.sleep(min(gap_ns / 1e9 / speed, MAX_GAP_S))


async def play_events(session: Session, *, speed: float = 1.0) -> AsyncIterator[ev.Event]:
    """The session's events as the agent emitted them, rebuilt from the recording.

    ``speed`` 1.0 is the original pace, 4.0 four times faster, 0 as fast as possible.
    """
    exchanges = [e for e in session.exchanges if is_model_call(e) and e.body_json is not None]
    recorded_turns = any(e.type == "TurnStarted" for e in session.events)
    base_url = str(session.engine.get("base_url") or "http://recorded.invalid/v1")
    timeline: list[Exchange | SessionEvent] = [*exchanges, *session.events]
    timeline.sort(key=lambda item: item.t_ns)
    clock = session.t0_ns
    turn = 0
    last_user: str | None = None
    requests_in_turn = 0
    tasks: dict[str, int] = {}
    """Requests played so far of each task call's sub-conversation."""
    for item in timeline:
        await _pause(item.t_ns - clock, speed)
        if isinstance(item, SessionEvent):
            clock = item.t_ns
            event = event_from_record(item)
            if event is not None:
                if isinstance(event, ev.TurnStarted):
                    requests_in_turn = 0
                yield event
            continue
        body = item.body_json or {}
        if item.task is not None:  # a task call's sub-conversation: shown under the call
            tasks[item.task] = tasks.get(item.task, 0) + 1
            async for event in _play_request(base_url, item, body, tasks[item.task], speed):
                yield ev.TaskEvent(call_id=item.task, event=event)
            clock = item.end_t_ns or (item.chunks[-1].t_ns if item.chunks else item.t_ns)
            continue
        user = _last_user_text(body)
        if not recorded_turns and user is not None and user != last_user:
            turn += 1
            requests_in_turn = 0
            yield ev.TurnStarted(turn=turn, user_text=user)
        last_user = user
        requests_in_turn += 1
        async for event in _play_request(base_url, item, body, requests_in_turn, speed):
            yield event
        clock = item.end_t_ns or (item.chunks[-1].t_ns if item.chunks else item.t_ns)
        if not recorded_turns and _ends_turn(item):
            yield ev.TurnFinished(
                reason="stop",
                content="",
                requests=requests_in_turn,
                prompt_tokens=0,
                completion_tokens=0,
            )


def _ends_turn(exchange: Exchange) -> bool:
    from sparkcode.sessions import exchange_output

    return exchange_output(exchange).finish_reason != "tool_calls"


async def _play_request(
    base_url: str, exchange: Exchange, body: dict[str, Any], number: int, speed: float
) -> AsyncIterator[ev.Event]:
    budget = body.get("thinking_token_budget")
    yield ev.RequestStarted(
        request=number,
        reasoning_effort=body.get("reasoning_effort"),
        thinking_token_budget=budget if isinstance(budget, int) else None,
        messages=len(body.get("messages") or []),
    )
    parser = StreamParser(source=base_url)
    parser.stats.started = time.monotonic()
    reads = recorded_reads(exchange, speed, url=f"{base_url}/chat/completions")
    # Small-model mode: the user saw each JSON step's answer, not the JSON.
    steps = StepText() if "structured_outputs" in body else None
    try:
        async for delta in parser.parse(reads):
            stats = parser.stats
            if delta.reasoning:
                yield ev.ReasoningDelta(
                    text=delta.reasoning,
                    tokens_so_far=stats.reasoning_tokens,
                    budget=budget if isinstance(budget, int) else None,
                )
            text = (
                delta.content if steps is None or not delta.content else steps.feed(delta.content)
            )
            if text:
                yield ev.ContentDelta(text=text)
            if delta.usage:
                yield ev.UsageUpdate(
                    prompt_tokens=stats.prompt_tokens,
                    completion_tokens=stats.completion_tokens,
                    reasoning_tokens=stats.reasoning_tokens,
                    ttft_s=stats.ttft_s,
                    decode_tok_s=stats.decode_tok_s,
                    prefill_tok_s=stats.prefill_tok_s,
                    context_used=stats.prompt_tokens + stats.completion_tokens,
                    context_limit=None,
                    cached_tokens=stats.cached_tokens,
                )
        rest = steps.finish() if steps is not None else ""
        if rest:
            yield ev.ContentDelta(text=rest)
    except ChatError as exc:
        yield ev.AgentError(message=f"recorded request {exchange.index}: {exc}")
