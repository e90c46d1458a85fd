"""A recorded session as a readable transcript: turns, requests, tool calls.

:func:`build_transcript` reads the agent's events as replay plays them back
(``sparkcode.replay.play_events``, the same reader as ``replay --play`` and the
TUI's ``/sessions`` playback) and takes each request's timing from its recorded
exchange (a playback at full speed has no timing of its own). Every string is
passed through the session's :class:`~._redact.Redactor` before it is kept:
secrets in this process's environment and any credential header the
recording holds (already redacted when it was written) never reach an export.
:mod:`._render_md` and :mod:`._render_html` draw the result.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from sparkcode.agent.core import events as ev

from ._records import Exchange, Session
from ._redact import Redactor
from ._sse import exchange_output, is_model_call


@dataclass
class ToolCall:
    call_id: str
    name: str
    arguments: str
    """The arguments as pretty JSON (or the raw text the model sent)."""
    result: str | None = None
    error: str | None = None
    diff: str | None = None
    duration_s: float | None = None
    approval: str | None = None
    """How the call was approved or denied, when it had to be."""
    nested: list[Step] = field(default_factory=list)
    """A ``task`` call's sub-conversation."""


@dataclass
class Request:
    """One chat-completions request of a turn and what the model streamed back."""

    number: int
    thinking: str = ""
    answer: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None
    ttft_s: float | None = None
    duration_s: float | None = None
    decode_tok_s: float | None = None
    finish: str | None = None


@dataclass
class Note:
    """Something the agent said about the turn (an error, an undo, a notice)."""

    kind: str
    text: str


Step = Request | ToolCall | Note


@dataclass
class Turn:
    number: int
    user_text: str
    images: list[str] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    finish: str | None = None
    start_s: float | None = None
    """Seconds from the session's start to the turn's first request."""
    duration_s: float | None = None
    """First request sent to last response ended (the tools between them included)."""

    @property
    def requests(self) -> list[Request]:
        return [s for s in self.steps if isinstance(s, Request)]

    def total(self, name: str) -> int:
        return sum(getattr(r, name) or 0 for r in self.requests)


@dataclass
class Transcript:
    session_id: str
    meta: list[tuple[str, str]]
    """(label, value) rows about the session: created, workspace, engine, model."""
    turns: list[Turn] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def session_redactor(session: Session) -> Redactor:
    """This process's secrets plus every credential the recording's headers show
    (:meth:`Redactor.headers` learns a bearer token it redacts)."""
    redactor = Redactor.from_env()
    for exchange in session.exchanges:
        redactor.headers(exchange.request_headers)
        redactor.headers(exchange.response_headers)
    return redactor


def model_exchanges(session: Session) -> list[Exchange]:
    """The exchanges replay plays, in its order (one per ``RequestStarted``)."""
    chosen = [e for e in session.exchanges if is_model_call(e) and e.body_json is not None]
    return sorted(chosen, key=lambda e: e.t_ns)


def _meta(session: Session, clean: Redactor) -> list[tuple[str, str]]:
    header, engine = session.header, session.engine
    rows = [
        ("created", str(header.get("created") or "?")),
        ("workspace", str(header.get("workspace") or "?")),
        ("model", str(engine.get("model") or "?")),
        ("engine", str(engine.get("profile") or engine.get("base_url") or "?")),
        ("vLLM", str(engine.get("vllm_version") or "?")),
        ("sparkcode", str(header.get("sparkcode_version") or "?")),
    ]
    if header.get("parent"):
        rows.append(("continues", f"{header['parent']} after turn {header.get('parent_turn')}"))
    return [(k, clean.text(v)) for k, v in rows]


def _arguments(event: ev.ToolCallStarted) -> str:
    if event.arguments or not event.raw_arguments.strip():
        return json.dumps(event.arguments, indent=2, ensure_ascii=False)
    return event.raw_arguments


class _Builder:
    def __init__(self, session: Session, redactor: Redactor) -> None:
        self.session = session
        self.clean = redactor.text
        self.exchanges = iter(model_exchanges(session))
        self.transcript = Transcript(
            session.id,
            _meta(session, redactor),
            problems=[redactor.text(str(p)) for p in session.problems],
        )
        self.turn: Turn | None = None
        self.calls: dict[str, ToolCall] = {}
        self.turn_spans: dict[int, tuple[int, int]] = {}

    def _turn(self) -> Turn:
        if self.turn is None:  # events before any turn (a resumed session's notes)
            self.turn = Turn(number=0, user_text="")
            self.transcript.turns.append(self.turn)
        return self.turn

    def add(self, event: ev.Event, steps: list[Step] | None = None) -> None:
        if isinstance(event, ev.TaskEvent):
            parent = self.calls.get(event.call_id)
            self.add(event.event, parent.nested if parent is not None else None)
        elif isinstance(event, ev.TurnStarted):
            self.turn = Turn(
                event.turn, self.clean(event.user_text), [self.clean(i) for i in event.images]
            )
            self.transcript.turns.append(self.turn)
        elif isinstance(event, ev.TurnFinished):
            if steps is None:
                self._turn().finish = event.reason
        else:
            self._step(event, steps if steps is not None else self._turn().steps, top=steps is None)

    def _step(self, event: ev.Event, into: list[Step], *, top: bool) -> None:
        if isinstance(event, ev.RequestStarted):
            into.append(self._request(event.request, top=top))
        elif isinstance(event, ev.ReasoningDelta | ev.ContentDelta | ev.UsageUpdate):
            self._stream(event, into)
        elif isinstance(event, ev.ToolCallStarted):
            call = ToolCall(event.call_id, event.name, self.clean(_arguments(event)))
            self.calls[event.call_id] = call
            into.append(call)
        elif isinstance(event, ev.ToolCallFinished):
            self._finished(event, into)
        elif isinstance(event, ev.ApprovalResolved):
            approved = self.calls.get(event.call_id)
            verdict = ("approved" if event.approved else "denied") + f" by {event.by}"
            verdict += f": {event.reason}" if event.reason else ""
            if approved is not None:
                approved.approval = self.clean(verdict)
            else:
                into.append(Note("approval", self.clean(f"{event.tool} {verdict}")))
        else:
            note = _note(event)
            if note is not None:
                into.append(Note(note[0], self.clean(note[1])))

    def _request(self, number: int, *, top: bool) -> Request:
        request = Request(number)
        exchange = next(self.exchanges, None)
        if exchange is None:
            return request
        end = exchange.end_t_ns or (exchange.chunks[-1].t_ns if exchange.chunks else None)
        if exchange.chunks:
            request.ttft_s = (exchange.chunks[0].t_ns - exchange.t_ns) / 1e9
        if end is not None:
            request.duration_s = (end - exchange.t_ns) / 1e9
        output = exchange_output(exchange)
        request.finish = output.finish_reason
        tokens = output.completion_tokens
        if tokens and len(exchange.chunks) > 1:
            span = (exchange.chunks[-1].t_ns - exchange.chunks[0].t_ns) / 1e9
            request.decode_tok_s = tokens / span if span > 0 else None
        if top and self.turn is not None:
            first, _ = self.turn_spans.get(self.turn.number, (exchange.t_ns, 0))
            self.turn_spans[self.turn.number] = (first, end or exchange.t_ns)
        return request

    def _stream(self, event: ev.Event, into: list[Step]) -> None:
        request = next((s for s in reversed(into) if isinstance(s, Request)), None)
        if request is None:
            request = Request(0)
            into.append(request)
        if isinstance(event, ev.ReasoningDelta):
            request.thinking += self.clean(event.text)
        elif isinstance(event, ev.ContentDelta):
            request.answer += self.clean(event.text)
        elif isinstance(event, ev.UsageUpdate):
            request.prompt_tokens = event.prompt_tokens
            request.completion_tokens = event.completion_tokens
            request.reasoning_tokens = event.reasoning_tokens
            request.cached_tokens = event.cached_tokens

    def _finished(self, event: ev.ToolCallFinished, into: list[Step]) -> None:
        call = self.calls.get(event.call_id)
        if call is None:
            call = ToolCall(event.call_id, event.name, "")
            into.append(call)
        call.result = self.clean(event.result)
        call.error = self.clean(event.error) if event.error else None
        call.diff = self.clean(event.diff) if event.diff else None
        call.duration_s = event.duration_s

    def finish(self) -> Transcript:
        # Events before the first turn that showed nothing leave no empty turn behind.
        self.transcript.turns = [t for t in self.transcript.turns if t.number or t.steps]
        # Redacting pieces one by one misses a secret split across two deltas.
        for turn in self.transcript.turns:
            for request in turn.requests:
                request.thinking = self.clean(request.thinking)
                request.answer = self.clean(request.answer)
            span = self.turn_spans.get(turn.number)
            if span is not None:
                turn.start_s = (span[0] - self.session.t0_ns) / 1e9
                turn.duration_s = (span[1] - span[0]) / 1e9
        return self.transcript


def _note(event: ev.Event) -> tuple[str, str] | None:
    """The one line a transcript keeps of the agent's other events (None: nothing)."""
    if isinstance(event, ev.AgentError):
        return "error", event.message
    if isinstance(event, ev.Notice):
        return "notice", event.message
    if isinstance(event, ev.UndoApplied):
        return "undo", f"undo: {', '.join(event.changed) or 'no files'} restored"
    if isinstance(event, ev.ContextCompacted):
        return "compacted", (
            f"context compacted: {event.messages_summarised} messages, "
            f"{event.tokens_before} tokens -> ~{event.tokens_after_estimate}"
        )
    if isinstance(event, ev.DegenerationDetected):
        return "degenerate", f"degenerate {event.channel} ({event.pattern}): {event.detail}"
    if isinstance(event, ev.BudgetExceeded):
        return "budget", f"thinking budget exceeded: {event.used} of {event.budget} tokens"
    if isinstance(event, ev.SteerDelivered):
        return "steer", f"steered: {event.text}"
    if isinstance(event, ev.HookRan):
        state = "blocked" if event.blocked else f"exit {event.exit_code}"
        return "hook", f"hook {event.hook_event} `{event.command}`: {state}"
    if isinstance(event, ev.TodoUpdated):
        return "todo", "todo: " + "; ".join(f"[{i.status}] {i.text}" for i in event.items)
    return None


def build_transcript(
    session: Session, events: Iterable[ev.Event], redactor: Redactor | None = None
) -> Transcript:
    """The transcript of ``session`` from its played-back ``events``."""
    builder = _Builder(session, redactor or session_redactor(session))
    for event in events:
        builder.add(event)
    return builder.finish()


def _seconds(value: float | None) -> str | None:
    return None if value is None else f"{value:.2f} s"


def request_figures(request: Request) -> str:
    """``1300 prompt tokens · 45 completion tokens · ...``: what is known of one request."""
    parts = [
        f"{request.prompt_tokens} prompt tokens" if request.prompt_tokens is not None else None,
        f"{request.cached_tokens} cached" if request.cached_tokens else None,
        f"{request.completion_tokens} completion tokens"
        if request.completion_tokens is not None
        else None,
        f"{request.reasoning_tokens} thinking" if request.reasoning_tokens else None,
        f"first token {_seconds(request.ttft_s)}" if request.ttft_s is not None else None,
        _seconds(request.duration_s),
        f"{request.decode_tok_s:.1f} tok/s" if request.decode_tok_s else None,
        f"finish {request.finish}" if request.finish else None,
    ]
    return " · ".join(p for p in parts if p)


def turn_figures(turn: Turn) -> str:
    """The turn's line: when, how long, how many requests and tokens, how it ended."""
    count = len(turn.requests)
    parts = [
        f"at {_seconds(turn.start_s)}" if turn.start_s is not None else None,
        f"took {_seconds(turn.duration_s)}" if turn.duration_s is not None else None,
        f"{count} request{'s' if count != 1 else ''}",
        f"{turn.total('prompt_tokens')} prompt tokens",
        f"{turn.total('completion_tokens')} completion tokens",
        f"ended: {turn.finish}" if turn.finish else None,
    ]
    return " · ".join(p for p in parts if p)
