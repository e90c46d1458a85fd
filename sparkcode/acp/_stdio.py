"""stdio for ACP: protocol alone on stdout, and an answer to every bad line.

:func:`protocol_stdout` moves the real stdout to a private descriptor and
points descriptor 1 at stderr before anything else runs, so a stray print, a
library's warning or a child process (the vLLM engine the supervisor starts, an
MCP server) can never corrupt the JSON-RPC stream: only :class:`LineTransport`
writes to the editor.

:class:`LineTransport` is the SDK's newline-delimited JSON framing with the
JSON-RPC 2.0 answers the SDK leaves out: a line that is not JSON gets
``-32700 Parse error`` and one that is not a request object gets ``-32600
Invalid Request`` (the SDK logs the first and would stop reading at the
second), and the agent keeps reading either way.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import IO, Any

LINE_LIMIT = 50 * 1024 * 1024
"""A prompt with an embedded file is one line; the SDK's own default is 50 MB."""


def protocol_stdout() -> IO[bytes]:
    """The editor's pipe as a private file; fd 1 (and ``sys.stdout``) become stderr."""
    sys.stdout.flush()
    proto = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return proto


class LineTransport:
    """One JSON-RPC message a line, both ways (``acp._transport.Transport``)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._lock = asyncio.Lock()

    @classmethod
    async def over(cls, stdin: IO[Any], stdout: IO[bytes]) -> LineTransport:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=LINE_LIMIT)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, stdout
        )
        return cls(reader, asyncio.StreamWriter(transport, protocol, None, loop))

    async def send(self, message: dict[str, Any]) -> None:
        line = json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n"
        async with self._lock:
            # A lone surrogate (a model's broken \\ud83d escape) becomes U+FFFD: the
            # message still goes out as valid UTF-8 instead of being lost.
            self._writer.write(line.encode("utf-8", "replace"))
            await self._writer.drain()

    async def receive(self) -> dict[str, Any] | None:
        while True:
            try:
                line = await self._reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:
                line = exc.partial
                if not line.strip():
                    return None
            except asyncio.LimitOverrunError:
                await self._skip_line()
                await self._error(
                    None,
                    -32600,
                    "Invalid Request",
                    f"a message longer than {LINE_LIMIT} bytes was dropped",
                )
                continue
            text = line.strip()
            if not text:
                continue
            try:
                message = json.loads(text)
            except ValueError as exc:
                await self._error(None, -32700, "Parse error", f"not JSON: {exc}")
                continue
            if not isinstance(message, dict) or not (
                isinstance(message.get("method"), str) or "id" in message
            ):
                ident = message.get("id") if isinstance(message, dict) else None
                await self._error(
                    ident,
                    -32600,
                    "Invalid Request",
                    "expected a JSON-RPC 2.0 request, notification or response object",
                )
                continue
            return message

    async def _skip_line(self) -> None:
        while True:
            try:
                await self._reader.readuntil(b"\n")
                return
            except asyncio.LimitOverrunError as exc:
                await self._reader.readexactly(exc.consumed)
            except asyncio.IncompleteReadError:
                return

    async def _error(self, ident: Any, code: int, message: str, details: str) -> None:
        await self.send(
            {
                "jsonrpc": "2.0",
                "id": ident,
                "error": {"code": code, "message": message, "data": {"details": details}},
            }
        )

    async def close(self) -> None:
        self._writer.close()


async def serve(agent: Any, stdin: IO[Any], stdout: IO[bytes]) -> None:
    """Answer the editor on ``stdin``/``stdout`` until it closes the pipe."""
    from acp import run_agent

    transport = await LineTransport.over(stdin, stdout)
    try:
        await run_agent(agent, transport)
    finally:
        await agent.aclose()


__all__ = ["LINE_LIMIT", "LineTransport", "protocol_stdout", "serve"]
