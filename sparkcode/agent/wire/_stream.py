"""Parsing one streamed chat completion: SSE bytes to deltas, usage and tool calls.

:class:`StreamParser` reads any async iterator of body bytes (a live response
from :class:`~.client.ChatClient`, or a recorded one from ``sparkcode.replay``)
and imports nothing from the client. The bytes are split into SSE events here
(faster than ``aiter_lines``); all complete events of one read are decoded by one
msgspec call and merged into one :class:`~._chat_types.StreamDelta`. Tokens are
counted from the server's ``usage`` (``stream_options.continuous_usage_stats``),
never from the number of frames: speculative decoding sends several per frame.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ._wire import FRAME_DECODER, Frame
from .chat_types import (
    ChatError,
    ChatResult,
    EngineGone,
    StreamDelta,
    StreamStats,
    ToolCall,
    error_text,
    json_or_text,
)


@dataclass
class _Builder:
    """The assistant message as its deltas arrive."""

    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, ToolCall] = field(default_factory=dict)
    args: dict[int, list[str]] = field(default_factory=dict)
    finish_reason: str | None = None
    done: bool = False
    hidden: list[int] = field(default_factory=list)
    """Token ids of frames whose delta was empty (text the server held back)."""


class StreamParser:
    """One streamed response: :meth:`parse` its body for :class:`StreamDelta`, then
    :meth:`result`.

    ``source`` names where the bytes come from in errors (the server's URL, a
    recorded request); ``stats`` is filled as the stream is read.
    """

    def __init__(self, *, source: str, stats: StreamStats | None = None) -> None:
        self.source = source
        self.stats = stats if stats is not None else StreamStats()
        self._b = _Builder()

    @property
    def done(self) -> bool:
        """The response is complete (``[DONE]``, or the body ended after a finish reason)."""
        return self._b.done

    async def parse(self, reads: AsyncIterator[bytes]) -> AsyncIterator[StreamDelta]:
        """Yield one :class:`StreamDelta` per read of ``reads`` that carried anything.

        All complete events of one read are decoded in one call and merged:
        consumers see text as soon as it arrives, without paying for one event
        (or one decoder call) per frame. A body that ends before a finish reason
        raises :class:`EngineGone`; errors of ``reads`` itself pass through.
        """
        buf = b""
        b = self._b
        block = self._block
        # Line ends are normalised to \n until the first line shows the server
        # uses plain \n (servers do not mix); a \r at a read's end waits for the next.
        crlf: bool | None = None
        held_cr = False
        # A blank line after the body ends the last event even when the server left
        # its blank line off, so one path parses every event.
        async for chunk in _append(reads, b"\n\n"):
            if crlf is not False:
                if held_cr:
                    chunk, held_cr = b"\r" + chunk, False
                if chunk.endswith(b"\r"):
                    chunk, held_cr = chunk[:-1], True
                if crlf is None and b"\n" in chunk:
                    crlf = b"\r" in chunk
                chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if buf:
                chunk = buf + chunk
            cut = chunk.rfind(b"\n\n")
            if cut < 0:
                buf = chunk
                continue
            buf = chunk[cut + 2 :]
            delta = block(chunk, cut)
            if delta is not None:
                yield delta
            if b.done:
                return
        if b.finish_reason is None:
            raise EngineGone(
                f"the stream from {self.source} ended before the "
                "response was complete (engine stopped or crashed?)"
            )
        b.done = True  # finished without [DONE]: some servers do that

    def _block(self, data: bytes, end: int) -> StreamDelta | None:
        """The complete SSE events in ``data[:end]`` -> one merged delta.

        ``data`` may go on with the start of an event still arriving; it is left
        alone, and not copying the complete part off saves a pass over the stream.
        """
        while end and data[end - 1] == 10:
            end -= 1
        if data[end - 12 : end] == b"data: [DONE]" and (
            end == 12 or data[end - 14 : end - 12] == b"\n\n"
        ):
            self._b.done = True
            end = max(end - 14, 0)
        if not end:
            return None
        frames: list[Frame] | None = None
        if data.startswith(b"data: {"):
            # The usual shape: only one-line JSON data events. Blanking every later
            # "data: " makes the block JSON lines (the first is skipped by a view,
            # not a copy); a same-length replace is one pass, several times faster
            # than a shrinking one. Anything else (comments, other SSE fields,
            # multi-line data) leaves invalid JSON and takes the general path.
            try:
                frames = FRAME_DECODER.decode_lines(
                    memoryview(data.replace(b"\n\ndata: ", _BLANKED))[6:end]
                )
            except msgspec.DecodeError:
                frames = None
        if frames is None:
            frames = self._general(data[:end])
            if not frames:
                return None
        elif self.stats.first_token is not None:
            fast = self._fast(frames)
            if fast is not None:
                return fast
        return self._frames(frames)

    def _general(self, block: bytes) -> list[Frame]:
        """Any valid SSE: split events, keep data fields, stop at [DONE]."""
        payloads: list[bytes] = []
        for event in block.split(b"\n\n"):
            payload = _sse_data(event)
            if payload is None:
                continue  # comments, event:/id:/retry: fields
            if payload[:1] == b"{":
                payloads.append(payload)
            elif payload.strip() == b"[DONE]":
                self._b.done = True
                break
            else:
                raise ChatError(f"malformed stream frame: {payload[:200]!r}")
        frames: list[Frame] = []
        for payload in payloads:
            try:
                frames.append(FRAME_DECODER.decode(payload))
            except msgspec.DecodeError:
                raise ChatError(f"malformed stream frame: {payload[:200]!r}") from None
        return frames

    def _fast(self, frames: list[Frame]) -> StreamDelta | None:
        """Text-only frames with usage on each (the bulk of a stream), accounted
        with comprehensions instead of a per-frame loop; None = take the slow path."""
        last = frames[-1].usage
        if last is None or last.completion_tokens_details or last.prompt_tokens_details:
            return None
        try:
            # Frames without choices (errors, a final usage frame) raise IndexError.
            deltas = [f.choices[0].delta for f in frames]
            if frames[-1].choices[0].finish_reason:  # n=1: the finishing frame is last
                return None
            calls = [d.tool_calls for d in deltas if d.tool_calls]  # type: ignore[union-attr]
            reasoning = "".join(
                [
                    d.reasoning or d.reasoning_content or ""  # type: ignore[union-attr]
                    for d in deltas
                ]
            )
            content = "".join([d.content or "" for d in deltas])  # type: ignore[union-attr]
        except (IndexError, AttributeError):
            return None
        if reasoning and (content or calls):
            return None  # the switch from thinking to answering: count per frame
        if frames[0].choices[0].token_ids is not None:
            hidden = [
                f.choices[0].token_ids
                for f, d in zip(frames, deltas, strict=True)
                if not (
                    d.content  # type: ignore[union-attr]
                    or d.reasoning  # type: ignore[union-attr]
                    or d.reasoning_content  # type: ignore[union-attr]
                    or d.tool_calls  # type: ignore[union-attr]
                )
            ]
            for ids in hidden:
                self._b.hidden.extend(ids or ())
        args = self._b.args
        for group in calls:
            for tc in group:
                fn = tc.function
                if tc.id is None and fn is not None and fn.name is None and tc.index in args:
                    if fn.arguments:  # the common case: more argument text, inline
                        args[tc.index].append(fn.arguments)
                else:
                    self._tool_delta(tc.index, tc.id, fn)
        stats = self.stats
        if reasoning and last.completion_tokens > stats.completion_tokens:
            stats.reasoning_tokens += last.completion_tokens - stats.completion_tokens
        stats.completion_tokens = last.completion_tokens
        stats.prompt_tokens = last.prompt_tokens
        stats.usage_seen = True
        stats.frames += len(frames)
        if reasoning or content or calls:
            stats.last_token = time.monotonic()
        if reasoning:
            self._b.reasoning.append(reasoning)
        if content:
            self._b.content.append(content)
        return StreamDelta(reasoning, content, bool(calls), True)

    def _frames(self, frames: list[Frame]) -> StreamDelta | None:
        """Account frames one by one (any shape); the merged delta, if any."""
        b = self._b
        stats = self.stats
        reasoning: list[str] = []
        content: list[str] = []
        calls = usage_seen = produced = False
        completion = stats.completion_tokens
        for frame in frames:
            if frame.error is not None:
                raise ChatError(f"server error mid-stream: {error_text(frame.error)}")
            thought = False
            made = False
            for choice in frame.choices:
                d = choice.delta
                if choice.token_ids and (
                    d is None
                    or not (d.content or d.reasoning or d.reasoning_content or d.tool_calls)
                ):
                    b.hidden.extend(choice.token_ids)
                if d is not None:
                    r = d.reasoning or d.reasoning_content
                    if r:
                        thought = made = True
                        reasoning.append(r)
                    if d.content:
                        made = True
                        content.append(d.content)
                    if d.tool_calls:
                        made = calls = True
                        for tc in d.tool_calls:
                            self._tool_delta(tc.index, tc.id, tc.function)
                if choice.finish_reason:
                    b.finish_reason = choice.finish_reason
            usage = frame.usage
            if usage is not None:
                usage_seen = True
                if thought and usage.completion_tokens > completion:
                    stats.reasoning_tokens += usage.completion_tokens - completion
                completion = usage.completion_tokens
                stats.prompt_tokens = usage.prompt_tokens
                if usage.completion_tokens_details or usage.prompt_tokens_details:
                    _details(stats, usage)
            elif made and not stats.usage_seen:
                # No usage from this server: one token per frame is the best guess.
                completion += 1
                if thought:
                    stats.reasoning_tokens += 1
            if made and not produced:
                produced = True
                if stats.first_token is None:
                    stats.first_token = time.monotonic()
                    stats.tokens_at_first = completion
        stats.frames += len(frames)
        stats.completion_tokens = completion
        if usage_seen:
            stats.usage_seen = True
        if produced:
            stats.last_token = time.monotonic()
        if not (reasoning or content or calls or usage_seen):
            return None
        r_text = "".join(reasoning)
        c_text = "".join(content)
        if r_text:
            b.reasoning.append(r_text)
        if c_text:
            b.content.append(c_text)
        return StreamDelta(r_text, c_text, calls, usage_seen)

    def _tool_delta(self, index: int, call_id: str | None, fn: Any) -> None:
        b = self._b
        call = b.calls.get(index)
        if call is None:
            call = b.calls[index] = ToolCall(index=index)
            b.args[index] = []
        if call_id:
            call.id = call_id
        if fn is not None:
            name = fn.name
            # Most servers send the name once; some repeat it, a few stream it in pieces.
            if name and name != call.name:
                call.name += name
            if fn.arguments:
                b.args[index].append(fn.arguments)

    @property
    def content(self) -> str:
        return "".join(self._b.content)

    @property
    def reasoning(self) -> str:
        return "".join(self._b.reasoning)

    def result(self, *, cut: bool = False) -> ChatResult:
        """The message assembled so far (complete once parsing has ended); ``cut``: the
        reader closed the stream early."""
        b = self._b
        calls = []
        for index in sorted(b.calls):
            call = b.calls[index]
            call.arguments = "".join(b.args[index])
            if not call.id:
                call.id = f"call_{index}_{int(self.stats.started * 1000) % 10**8}"
            calls.append(call)
        return ChatResult(
            content="".join(b.content),
            reasoning="".join(b.reasoning),
            tool_calls=calls,
            finish_reason=b.finish_reason,
            stats=self.stats,
            cut=cut or not b.done,
            hidden_token_ids=list(b.hidden),
        )


_BLANKED = b"\n\n      "
"""What replaces each later ``\\n\\ndata: `` of a block: the same length, all whitespace."""


async def _append(reads: AsyncIterator[bytes], last: bytes) -> AsyncIterator[bytes]:
    async for chunk in reads:
        yield chunk
    yield last


async def peek_first_event(reads: AsyncIterator[bytes]) -> tuple[str | None, AsyncIterator[bytes]]:
    """Read ``reads`` up to the first complete event: its error message if it is an
    error frame (vLLM reports a rejected request field that way once streaming),
    and the same body again from its start for :meth:`StreamParser.parse`."""
    data = b""
    async for chunk in reads:
        data += chunk
        if b"\n\n" in data.replace(b"\r\n", b"\n"):
            break
    rest = _prepend(data, reads)
    first = data.replace(b"\r\n", b"\n").split(b"\n\n", 1)[0]
    payload = _sse_data(first)
    if payload is None or b'"error"' not in payload[:20]:
        return None, rest
    decoded = json_or_text(payload.decode("utf-8", "replace"))
    if isinstance(decoded, dict) and "error" in decoded:
        return error_text(decoded), rest
    return None, rest


async def _prepend(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    if first:
        yield first
    async for chunk in rest:
        yield chunk


def _sse_data(event: bytes) -> bytes | None:
    """The data of one SSE event (lines joined), None if it has no data field."""
    data = [line[5:].removeprefix(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
    return b"\n".join(data) if data else None


def _details(stats: StreamStats, usage: Any) -> None:
    details = usage.completion_tokens_details
    if details and isinstance(details.get("reasoning_tokens"), int):
        stats.reasoning_tokens = max(stats.reasoning_tokens, details["reasoning_tokens"])
    pdetails = usage.prompt_tokens_details
    if pdetails and isinstance(pdetails.get("cached_tokens"), int):
        stats.cached_tokens = pdetails["cached_tokens"]
