"""A scripted OpenAI-compatible server on httpx.MockTransport.

Each call to /v1/chat/completions pops the next :class:`Reply`; its frames are
streamed as SSE with continuous usage. Requests are kept for assertions.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class Reply:
    """One scripted response."""

    reasoning: list[str] = field(default_factory=list)
    content: list[str] = field(default_factory=list)
    tool_calls: list[tuple[str, str]] = field(default_factory=list)
    """(name, raw arguments text) - streamed in two pieces each."""
    tokens_per_frame: int = 1
    finish: str | None = None
    status: int = 200
    error_body: dict[str, Any] | None = None
    die_after: int | None = None
    """Raise a transport error after this many frames (engine gone)."""
    until_closed: bool = False
    """Stream reasoning (one token a frame) until the client stops reading."""
    unstreamed: int = 0
    """Tokens generated but never streamed, only counted in the final usage (what
    vLLM's streaming tool-call parser does with a call it cannot parse)."""
    held_back: str = ""
    """Text generated but streamed as empty deltas carrying only ``token_ids`` (one
    id per character, its code point), what vLLM sends with ``return_token_ids``
    while its streaming parser holds a call back; ``/detokenize`` decodes them."""
    gate: asyncio.Event | None = None
    """Streaming waits for this event (a test acts while the request is in flight)."""
    silence_s: float = 0.0
    """Over real HTTP (``http_server``): seconds of silence after the headers, before
    the first frame (what vLLM sends while it prefills: nothing)."""


def frame(
    delta: dict[str, Any],
    *,
    prompt: int,
    completion: int,
    finish: str | None = None,
    token_ids: list[int] | None = None,
) -> bytes:
    choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
    if token_ids is not None:
        choice["token_ids"] = token_ids
    body = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [choice],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def reply_frames(reply: Reply, prompt: int = 50) -> list[bytes]:
    out: list[bytes] = []
    n = 0
    k = reply.tokens_per_frame
    for text in reply.reasoning:
        n += k
        out.append(frame({"reasoning": text}, prompt=prompt, completion=n))
    for text in reply.content:
        n += k
        out.append(frame({"content": text}, prompt=prompt, completion=n))
    for i, (name, args) in enumerate(reply.tool_calls):
        half = len(args) // 2
        n += k
        out.append(
            frame(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": f"call_{i}_{n}",
                            "type": "function",
                            "function": {"name": name, "arguments": args[:half]},
                        }
                    ]
                },
                prompt=prompt,
                completion=n,
            )
        )
        n += k
        out.append(
            frame(
                {"tool_calls": [{"index": i, "function": {"arguments": args[half:]}}]},
                prompt=prompt,
                completion=n,
            )
        )
    for i in range(0, len(reply.held_back), 3):
        n += 1
        out.append(
            frame(
                {},
                prompt=prompt,
                completion=n,
                token_ids=[ord(c) for c in reply.held_back[i : i + 3]],
            )
        )
    finish = reply.finish or ("tool_calls" if reply.tool_calls else "stop")
    out.append(frame({}, prompt=prompt, completion=n + reply.unstreamed, finish=finish))
    out.append(b"data: [DONE]\n\n")
    return out


class ScriptedServer:
    def __init__(
        self, replies: list[Reply], *, max_model_len: int = 4096, metrics: list[str] | None = None
    ) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        self.max_model_len = max_model_len
        self.metrics = list(metrics or [])
        self.frames_sent = 0

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.endswith("/models"):
            return httpx.Response(
                200,
                json={
                    "object": "list",
                    "data": [{"id": "m", "object": "model", "max_model_len": self.max_model_len}],
                },
            )
        if path == "/metrics":
            if not self.metrics:
                return httpx.Response(404)
            return httpx.Response(
                200, text=self.metrics.pop(0) if len(self.metrics) > 1 else self.metrics[0]
            )
        if path == "/health":
            return httpx.Response(200)
        if path == "/detokenize":
            tokens = json.loads(request.content)["tokens"]
            return httpx.Response(200, json={"prompt": "".join(map(chr, tokens))})
        body = json.loads(request.content)
        self.requests.append(body)
        if not self.replies:
            return httpx.Response(500, json={"error": {"message": "script exhausted"}})
        reply = self.replies.pop(0)
        if reply.status != 200:
            return httpx.Response(reply.status, json=reply.error_body or {})
        # Prompt tokens roughly as a tokenizer would count them (4 characters each).
        frames = reply_frames(reply, prompt=len(json.dumps(body["messages"])) // 4)
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=self._stream(reply, frames)
        )

    async def _stream(self, reply: Reply, frames: list[bytes]) -> AsyncIterator[bytes]:
        if reply.gate is not None:
            await reply.gate.wait()
        if reply.until_closed:
            for n in range(1, 100_000):
                self.frames_sent += 1
                yield frame({"reasoning": "hmm "}, prompt=100, completion=n)
            return
        for i, chunk in enumerate(frames):
            if reply.die_after is not None and i >= reply.die_after:
                raise httpx.ReadError("connection reset by peer")
            yield chunk


def assistant_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == "assistant"]
