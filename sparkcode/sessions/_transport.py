"""The httpx transport that records: every request and every response byte.

:class:`RecordingTransport` wraps the transport under the agent's client, so
every request the agent makes, and every chunk that comes back, passes through
it and nothing can bypass it. Each chunk is handed to the recorder before the
client sees it.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import httpx

from ._recorder import SessionRecorder

TAIL_CHUNKS = 64
"""Chunks of each streamed response kept in memory to find the final usage object."""

UNRECORDED_PATHS: tuple[str, ...] = ("/metrics", "/health")
"""Monitoring polls: they cannot change what the model says, and would bloat the file."""


def find_usage(tail: bytes, content_type: str | None) -> Any:
    """The last ``usage`` object in a response body's tail (SSE or plain JSON)."""
    if content_type and "json" in content_type and "event-stream" not in content_type:
        try:
            body = json.loads(tail)
        except ValueError:
            return None
        return body.get("usage") if isinstance(body, dict) else None
    # From the end: with continuous usage every frame carries one; the last wins.
    for line in reversed(tail.split(b"\n")):
        if not line.startswith(b"data:") or b'"usage"' not in line:
            continue
        try:
            obj = json.loads(line[5:].strip())
        except ValueError:
            continue  # the first line of the tail can be cut; later ones are whole
        if isinstance(obj, dict) and obj.get("usage"):
            return obj["usage"]
    return None


class _RecordingStream(httpx.AsyncByteStream):
    """Passes a response body through, recording each chunk as it arrives."""

    def __init__(
        self,
        inner: httpx.AsyncByteStream,
        recorder: SessionRecorder,
        index: int,
        content_type: str | None,
    ) -> None:
        self._inner = inner
        self._recorder = recorder
        self._index = index
        self._content_type = content_type
        # The last chunks, enough to find the final usage; all of a JSON body.
        whole = bool(content_type and "json" in content_type)
        self._tail: deque[bytes] = deque(maxlen=None if whole else TAIL_CHUNKS)
        self._chunks = 0
        self._bytes = 0
        self._ended = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        # Hot path: one call per chunk. The counters live on self, because the client
        # may close the stream (aclose) without ever resuming this generator.
        record, index, keep = self._recorder.chunk, self._index, self._tail.append
        try:
            async for data in self._inner:
                record(index, data)
                keep(data)
                self._chunks += 1
                self._bytes += len(data)
                yield data
        except GeneratorExit:
            self._finish(self._early_close_error())
            raise
        except BaseException as exc:
            self._finish(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
            raise
        self._finish(None)

    def _finish(self, error: str | None) -> None:
        if self._ended:
            return
        self._ended = True
        self._recorder.end(
            self._index,
            usage=find_usage(b"".join(self._tail), self._content_type),
            error=error,
            chunks=self._chunks,
            nbytes=self._bytes,
        )

    def _early_close_error(self) -> str | None:
        """None when the body was complete anyway (the client stops reading at the
        SSE ``[DONE]`` line), else why the recording ends here."""
        if b"".join(self._tail).rstrip().endswith(b"data: [DONE]"):
            return None
        return "closed by the client before the end of the stream"

    async def aclose(self) -> None:
        self._finish(self._early_close_error())
        await self._inner.aclose()


class RecordingTransport(httpx.AsyncBaseTransport):
    """An httpx transport that records every exchange of the transport it wraps."""

    def __init__(self, inner: httpx.AsyncBaseTransport, recorder: SessionRecorder) -> None:
        self.inner = inner
        self.recorder = recorder

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path.endswith(UNRECORDED_PATHS):
            return await self.inner.handle_async_request(request)
        body = await request.aread()
        index = self.recorder.request(
            request.method, str(request.url), list(request.headers.items()), body
        )
        try:
            response = await self.inner.handle_async_request(request)
        except BaseException as exc:
            self.recorder.end(
                index, usage=None, error=f"{type(exc).__name__}: {exc}", chunks=0, nbytes=0
            )
            raise
        headers = list(response.headers.items())
        self.recorder.response(index, response.status_code, headers)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        stream = _RecordingStream(
            response.stream, self.recorder, index, response.headers.get("content-type")
        )
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=stream,
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()
