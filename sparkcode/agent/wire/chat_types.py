"""What the chat client hands back: errors, tool calls, stream statistics, results.

Shared by :mod:`.client` (requests) and :mod:`._stream` (reading a stream);
import them from :mod:`sparkcode.agent.wire.client`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import msgspec


class ChatError(Exception):
    """A request failed; ``status`` is the HTTP status when there was one."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class EngineGone(ChatError):
    """The server could not be reached or the connection dropped mid-stream."""


class StreamSilent(ChatError):
    """The server sent nothing for the stream's silence limit (``stream_idle``)."""

    def __init__(self, message: str, *, waited_s: float | None) -> None:
        super().__init__(message)
        self.waited_s = waited_s


class ToolChoiceUnsupported(ChatError):
    """The server cannot parse tool calls (vLLM without ``--tool-call-parser``)."""


@dataclass
class ToolCall:
    """One assembled tool call: ``arguments`` is the raw JSON text as streamed."""

    index: int
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass
class StreamStats:
    """Usage and timing of one streamed request."""

    started: float = 0.0
    """``time.monotonic()`` when the request was sent."""
    first_token: float | None = None
    last_token: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    cached_tokens: int | None = None
    tokens_at_first: int = 0
    """Completion tokens carried by the first frame (excluded from decode rate)."""
    usage_seen: bool = False
    """False when the server sent no usage at all (tokens are then estimated)."""
    frames: int = 0

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.started

    @property
    def decode_tok_s(self) -> float | None:
        if self.first_token is None or self.last_token is None:
            return None
        span = self.last_token - self.first_token
        tokens = self.completion_tokens - self.tokens_at_first
        return tokens / span if span > 0 and tokens > 0 else None

    @property
    def prefill_tok_s(self) -> float | None:
        ttft = self.ttft_s
        return self.prompt_tokens / ttft if ttft and self.prompt_tokens else None


@dataclass(slots=True)
class StreamDelta:
    """What one frame added. Empty strings when a kind of text did not change."""

    reasoning: str
    content: str
    tool_calls: bool
    """True when a tool call started or grew in this frame."""
    usage: bool
    """True when this frame carried usage."""


@dataclass
class ChatResult:
    """The assembled assistant message of a finished (or cut) stream."""

    content: str
    reasoning: str
    tool_calls: list[ToolCall]
    finish_reason: str | None
    stats: StreamStats
    cut: bool = False
    """True when the client closed the stream before the server finished."""
    hidden_token_ids: list[int] = field(default_factory=list)
    """Tokens the server generated but streamed as no text and no call (its tool
    parser swallowed them); known only from vLLM's ``return_token_ids``."""


@dataclass
class ModelCard:
    """One entry of ``/v1/models``."""

    id: str
    max_model_len: int | None = None
    root: str | None = None


def describe_error(exc: Exception) -> str:
    """``Type: message`` (httpx errors often have an empty message)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def json_or_text(text: str) -> Any:
    """An error body decoded as JSON if it is JSON, else the text itself."""
    try:
        return msgspec.json.decode(text.encode())
    except msgspec.DecodeError:
        return text


def error_text(error: Any) -> str:
    """The human message inside an OpenAI-style error payload."""
    if isinstance(error, dict):
        inner = error.get("error", error)
        if isinstance(inner, dict):
            return str(inner.get("message") or inner)
        if isinstance(inner, str):
            return inner
        return str(error.get("message") or error.get("detail") or error)
    return str(error)[:500]


TASK_HEADER = "X-Sparkcode-Task"
"""Marks a request of the ``task`` tool's sub-conversation (the value is the task
call's ID): the server ignores it, the recording keeps it, and resuming or playing
a session back tells the sub-conversation's requests from the conversation's by it."""


def api_key_headers(env_name: str | None) -> dict[str, str]:
    """``Authorization: Bearer`` with the key in variable ``env_name``, read now and
    never stored; no header without a variable name. ChatError if it is unset."""
    if not env_name:
        return {}
    key = os.environ.get(env_name)
    if not key:
        raise ChatError(f"environment variable {env_name} (the API key) is not set")
    return {"Authorization": f"Bearer {key}"}
