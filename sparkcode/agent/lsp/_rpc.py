"""JSON-RPC 2.0 over a language server's stdio, framed with ``Content-Length`` headers.

The client side only: requests with futures by id, notifications both ways, and the
server's own requests answered by a handler (``workspace/configuration`` and the
like). One reader task owns stdout; a second drains stderr into a short tail, since
an undrained pipe would stall a chatty server (basedpyright logs every analysis).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger(__name__)

STDERR_TAIL = 2000
"""Characters of the server's stderr kept for the notice when it dies."""
MAX_HEADER_LINES = 32
"""A frame with more header lines than this is not LSP: the stream is treated as broken."""

OnNotify = Callable[[str, Any], None]
OnRequest = Callable[[str, Any], Awaitable[Any]]


class RpcError(Exception):
    """The server answered a request with an error object."""

    def __init__(self, method: str, error: dict[str, Any]) -> None:
        super().__init__(f"{method}: {error.get('message', error)} (code {error.get('code')})")
        self.code = error.get("code")


class ServerGone(Exception):
    """The server's stdout closed (it exited or crashed) or sent something not LSP."""


class MethodNotFound(Exception):
    """Raised by a request handler for a method this client does not serve."""


def frame(message: dict[str, Any]) -> bytes:
    """``message`` as one LSP frame."""
    body = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


async def read_frame(reader: asyncio.StreamReader) -> dict[str, Any]:
    """The next message; :class:`ServerGone` at end of stream or on a malformed frame."""
    length: int | None = None
    for _ in range(MAX_HEADER_LINES):
        line = await reader.readline()
        if not line:
            raise ServerGone("the server closed its output")
        if line in (b"\r\n", b"\n"):
            break
        name, _, value = line.decode("ascii", "replace").partition(":")
        if name.strip().lower() == "content-length":
            try:
                length = int(value.strip())
            except ValueError:
                raise ServerGone(f"bad Content-Length header {line!r}") from None
    else:
        raise ServerGone("no end of headers (not an LSP stream)")
    if length is None or length < 0:
        raise ServerGone("a frame without Content-Length")
    try:
        body = await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        raise ServerGone("the server closed its output mid-message") from None
    try:
        message = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ServerGone(f"a frame that is not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise ServerGone("a frame that is not a JSON object")
    return message


class JsonRpc:
    """One connection: ``request``/``notify`` out, ``on_notify``/``on_request`` in."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        on_notify: OnNotify,
        on_request: OnRequest,
        stderr: asyncio.StreamReader | None = None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._on_notify = on_notify
        self._on_request = on_request
        self._pending: dict[int, tuple[str, asyncio.Future[Any]]] = {}
        self._next_id = 0
        self.gone: str | None = None
        """Why the connection ended (None while it is up)."""
        self.stderr_tail = ""
        """The last :data:`STDERR_TAIL` characters the server wrote to stderr."""
        self.closed = asyncio.Event()
        """Set once the reader saw the end of the stream."""
        self._tasks = [asyncio.create_task(self._read_loop())]
        if stderr is not None:
            self._tasks.append(asyncio.create_task(self._drain(stderr)))

    async def request(self, method: str, params: Any) -> Any:
        """Send a request and wait for its result (:class:`RpcError`, :class:`ServerGone`)."""
        if self.gone is not None:
            raise ServerGone(self.gone)
        self._next_id += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[self._next_id] = (method, future)
        await self._send(
            {"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params}
        )
        return await future

    async def notify(self, method: str, params: Any) -> None:
        if self.gone is not None:
            raise ServerGone(self.gone)
        await self._send({"jsonrpc": "2.0", "method": method, "params": params})

    async def _send(self, message: dict[str, Any]) -> None:
        try:
            self._writer.write(frame(message))
            await self._writer.drain()
        except (ConnectionError, RuntimeError) as exc:
            self._end(f"cannot write to the server: {exc}")
            raise ServerGone(self.gone or str(exc)) from None

    async def _read_loop(self) -> None:
        try:
            while True:
                message = await read_frame(self._reader)
                await self._dispatch(message)
        except ServerGone as exc:
            self._end(str(exc))
        except asyncio.CancelledError:
            self._end("the connection was closed")
            raise
        except Exception as exc:  # noqa: BLE001 - a handler bug must not leave waiters hanging
            log.exception("LSP reader failed")
            self._end(f"the client failed reading: {type(exc).__name__}: {exc}")

    async def _dispatch(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        if method is None:  # a response
            entry = self._pending.pop(message.get("id"), None)  # type: ignore[arg-type]
            if entry is None:
                return
            name, future = entry
            if future.done():
                return
            if "error" in message and message["error"] is not None:
                future.set_exception(RpcError(name, message["error"]))
            else:
                future.set_result(message.get("result"))
            return
        if "id" not in message:
            self._on_notify(str(method), message.get("params"))
            return
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
        try:
            reply["result"] = await self._on_request(str(method), message.get("params"))
        except MethodNotFound:
            reply["error"] = {"code": -32601, "message": f"method not found: {method}"}
        with contextlib.suppress(ServerGone):
            await self._send(reply)

    async def _drain(self, stderr: asyncio.StreamReader) -> None:
        with contextlib.suppress(Exception):
            while chunk := await stderr.read(4096):
                self.stderr_tail = (self.stderr_tail + chunk.decode("utf-8", "replace"))[
                    -STDERR_TAIL:
                ]

    def _end(self, why: str) -> None:
        if self.gone is None:
            self.gone = why
        for _, future in self._pending.values():
            if not future.done():
                future.set_exception(ServerGone(self.gone))
        self._pending.clear()
        self.closed.set()

    async def aclose(self) -> None:
        """Stop reading; every waiting request fails with :class:`ServerGone`."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        self._end("the connection was closed")
        with contextlib.suppress(Exception):
            self._writer.close()
