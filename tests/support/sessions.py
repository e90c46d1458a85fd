"""A deterministic OpenAI-compatible server on httpx.MockTransport, and helpers
to record sessions against it through the agent's real client."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from engine.paths import Paths
from sparkcode.agent.wire.client import ChatClient
from sparkcode.sessions import SessionRecorder, start_recording


def frame(delta: dict[str, Any], completion: int, finish: str | None = None) -> bytes:
    body = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": 10,
            "completion_tokens": completion,
            "total_tokens": 10 + completion,
        },
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _last(body: dict[str, Any], role: str) -> str:
    for message in reversed(body.get("messages") or []):
        if message.get("role") == role:
            return str(message.get("content") or "")
    return ""


class EchoServer:
    """Answers deterministically from the request, so reruns are identical.

    The answer echoes the last user message word by word. A request whose last
    user message contains TRIGGER, whose tool output contains "needle", and
    that follows (under the same ``cache_salt``) a request whose user message
    contained PRIME, gets a degenerate answer: a stand-in for a cache bug.
    """

    def __init__(self, *, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.requests: list[dict[str, Any]] = []
        self.primed: set[str] = set()

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def pieces(self, body: dict[str, Any]) -> list[str]:
        user = _last(body, "user")
        salt = str(body.get("cache_salt", ""))
        if "PRIME" in user:
            self.primed.add(salt)
        tool_text = " ".join(
            str(m.get("content")) for m in body.get("messages", []) if m.get("role") == "tool"
        )
        if "TRIGGER" in user and salt in self.primed and "needle" in tool_text:
            return ["la"] * 40
        words = user.split() or ["nothing"]
        return ["echo:"] + [f" {w}" for w in words] + [" ."]

    async def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"object": "list", "data": [{"id": "m"}]})
        body = json.loads(request.content)
        self.requests.append(body)
        pieces = self.pieces(body)
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=self._stream(pieces)
        )

    async def _stream(self, pieces: list[str]) -> AsyncIterator[bytes]:
        yield frame({"role": "assistant", "content": ""}, 0)
        for n, piece in enumerate(pieces, start=1):
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            yield frame({"content": piece}, n)
        yield frame({}, len(pieces) + 1, finish="stop")
        yield b"data: [DONE]\n\n"


async def record_conversation(
    turns: list[list[dict[str, Any]]],
    server_transport: httpx.AsyncBaseTransport,
    workspace: Path,
    *,
    api_key_env: str | None = None,
) -> SessionRecorder:
    """Send each message list through a recording ChatClient; return the recorder."""
    recorder, transport = start_recording(
        "http://scripted.test/v1",
        workspace=workspace,
        paths=Paths.from_env(),
        model="m",
        inner=server_transport,
        api_key_env=api_key_env,
    )
    client = ChatClient(
        "http://scripted.test/v1", "m", api_key_env=api_key_env, transport=transport
    )
    try:
        for messages in turns:
            async with client.stream_chat(messages, params={"temperature": 0}) as stream:
                async for _ in stream:
                    pass
    finally:
        await client.aclose()
        recorder.close()
    return recorder


def agentish_turns(tool_output: str) -> list[list[dict[str, Any]]]:
    """Four requests of a session: a warm-up, PRIME, filler, TRIGGER with a tool result."""
    system = {"role": "system", "content": "you are a test"}
    return [
        [system, {"role": "user", "content": "hello there"}],
        [system, {"role": "user", "content": "PRIME the cache"}],
        [system, {"role": "user", "content": "unrelated filler"}],
        [
            system,
            {"role": "user", "content": "read it"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": tool_output},
            {"role": "user", "content": "TRIGGER now"},
        ],
    ]


class EchoHTTP:
    """:class:`EchoServer` over real loopback HTTP (for the CLI, which opens its own
    connections), served by uvicorn in a thread."""

    def __init__(self) -> None:
        import threading

        import uvicorn

        from tests.support.engine import free_port

        self.echo = EchoServer()
        self.port = free_port()
        config = uvicorn.Config(
            self._asgi,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="off",
            interface="asgi3",
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _asgi(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        request = json.loads(body)
        self.echo.requests.append(request)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        async for data in self.echo._stream(self.echo.pieces(request)):
            await send({"type": "http.response.body", "body": data, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    def __enter__(self) -> EchoHTTP:
        import time

        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the echo HTTP server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
