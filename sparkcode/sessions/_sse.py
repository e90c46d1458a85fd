"""Turn a recorded response body back into what the model said.

The unit of comparison is the streamed *piece*: the text of one delta of one
channel (``content``, ``reasoning``, or a tool call's name or arguments). vLLM
sends one delta per decoding step, so without speculative decoding a piece is
one token (a token that ends inside a UTF-8 character or a possible stop
string is held back and merged into the next piece). :attr:`TurnOutput.pieces_are_tokens`
checks that against the reported ``completion_tokens``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ._records import Exchange, Session


@dataclass(frozen=True)
class Piece:
    """One streamed delta of one channel."""

    channel: str
    text: str
    token: int = field(default=-1, compare=False)
    """Completion tokens generated before this piece: exact when the server sent
    usage on every frame (``continuous_usage_stats``), else the piece's index."""


@dataclass
class TurnOutput:
    """What one response carried, in stream order."""

    pieces: list[Piece] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    error: str | None = None
    malformed_events: int = 0

    def text(self, channel: str | None = None) -> str:
        return "".join(p.text for p in self.pieces if channel is None or p.channel == channel)

    @property
    def content(self) -> str:
        return self.text("content")

    @property
    def reasoning(self) -> str:
        return self.text("reasoning")

    @property
    def completion_tokens(self) -> int | None:
        value = (self.usage or {}).get("completion_tokens")
        return value if isinstance(value, int) else None

    @property
    def pieces_are_tokens(self) -> bool | None:
        """Whether piece N is token N (None when the server reported no usage).

        A stream that ends on the end-of-sequence token has one token more than
        pieces, since that token has no text.
        """
        tokens = self.completion_tokens
        if tokens is None:
            return None
        return tokens - len(self.pieces) in (0, 1)


def sse_events(body: bytes) -> tuple[list[Any], int]:
    """The JSON payloads of an SSE body, and how many could not be parsed."""
    events: list[Any] = []
    bad = 0
    text = body.decode("utf-8", "replace").replace("\r\n", "\n")
    for block in text.split("\n\n"):
        data = [line[5:].lstrip(" ") for line in block.split("\n") if line.startswith("data:")]
        if not data:
            continue
        payload = "\n".join(data)
        if payload.strip() == "[DONE]":
            break
        try:
            events.append(json.loads(payload))
        except ValueError:
            bad += 1
    return events, bad


def _add_delta(out: TurnOutput, delta: dict[str, Any], token: int) -> None:
    for key, channel in (
        ("reasoning", "reasoning"),
        ("reasoning_content", "reasoning"),
        ("content", "content"),
    ):
        value = delta.get(key)
        if isinstance(value, str) and value:
            out.pieces.append(Piece(channel, value, token))
    for call in delta.get("tool_calls") or []:
        if not isinstance(call, dict):
            continue
        index = call.get("index", 0)
        function = call.get("function") or {}
        if isinstance(function.get("name"), str) and function["name"]:
            out.pieces.append(Piece(f"tool{index}.name", function["name"], token))
        if isinstance(function.get("arguments"), str) and function["arguments"]:
            out.pieces.append(Piece(f"tool{index}.arguments", function["arguments"], token))


def parse_output(body: bytes, *, streamed: bool) -> TurnOutput:
    """Parse a chat-completions (or completions) response body."""
    out = TurnOutput()
    if streamed:
        events, out.malformed_events = sse_events(body)
    else:
        try:
            events = [json.loads(body)]
        except ValueError:
            return TurnOutput(error="response body is not JSON", malformed_events=1)
    # Tokens generated before the current frame, from the previous frame's usage.
    tokens_before: int | None = 0
    for event in events:
        if not isinstance(event, dict):
            out.malformed_events += 1
            continue
        if isinstance(event.get("error"), dict | str):
            error = event["error"]
            out.error = error.get("message", str(error)) if isinstance(error, dict) else error
        count_before = len(out.pieces)
        token = tokens_before if tokens_before is not None else count_before
        for choice in event.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            if choice.get("finish_reason"):
                out.finish_reason = str(choice["finish_reason"])
            if isinstance(choice.get("delta"), dict):
                _add_delta(out, choice["delta"], token)
            elif isinstance(choice.get("message"), dict):
                _add_delta(out, choice["message"], token)
            elif isinstance(choice.get("text"), str) and choice["text"]:
                out.pieces.append(Piece("content", choice["text"], token))
        usage = event.get("usage")
        if isinstance(usage, dict):
            out.usage = usage
            done = usage.get("completion_tokens")
            tokens_before = done if isinstance(done, int) else None
        elif len(out.pieces) > count_before:
            # No usage on this frame: token positions fall back to piece counts.
            tokens_before = None
    return out


def is_streamed(exchange: Exchange) -> bool:
    content_type = exchange.response_header("content-type") or ""
    if "event-stream" in content_type:
        return True
    body = exchange.body_json or {}
    return bool(body.get("stream")) and "json" not in content_type


def exchange_output(exchange: Exchange) -> TurnOutput:
    """What the model said in one recorded exchange."""
    out = parse_output(exchange.response_bytes, streamed=is_streamed(exchange))
    if exchange.usage and out.usage is None:
        out.usage = exchange.usage
    if exchange.status is not None and exchange.status >= 400 and out.error is None:
        out.error = f"HTTP {exchange.status}"
    if exchange.error and out.error is None:
        out.error = exchange.error
    return out


def is_model_call(exchange: Exchange) -> bool:
    """A generation request (the turns that replay compares), not a model listing."""
    return exchange.method == "POST" and exchange.path.rstrip("/").endswith(
        ("/chat/completions", "/completions")
    )


def model_turns_count(session: Session) -> int:
    """How many generation requests the session made."""
    return sum(1 for e in session.exchanges if is_model_call(e))
