"""The session file format and the objects a loaded session is made of.

A session file is JSON Lines, one record per line, appended as things happen.
Every record has a ``kind``:

``header``
    First line: ``format``, ``session_id``, ``sparkcode_version``, ``workspace``,
    ``created`` (ISO time), ``t0_ns`` (``time.monotonic_ns()`` at creation),
    ``engine`` (the fingerprint of what served the session); from format 2
    also ``sampling`` (``seed``: the session seed every request's ``seed`` is
    derived from, null when none was sent; ``temperature``, ``top_p``) and, for
    a resumed or forked session, ``parent`` (its session ID) and
    ``parent_turn`` (the turns it took over); ``permission_mode``, the mode
    the session started in (a later switch is a ``ModeChanged`` event).
``request``
    ``req`` (0-based index), ``t_ns``, ``method``, ``url``, ``headers`` (pairs,
    redacted; a request of a ``task`` call's sub-conversation has
    ``X-Sparkcode-Task: <call id>``, :attr:`Exchange.task`) and the exact
    ``body`` (text, or ``body_b64`` if not UTF-8); a body that carried images
    has ``blobs`` (``[[offset, sha256], ...]``): each image's base64 was cut
    out at that byte offset and its bytes are stored once in
    ``<id>.blobs/<sha256>`` (:mod:`._blobs`); loading puts them back.
``response``
    ``req``, ``t_ns``, ``status``, ``headers``.
``chunk``
    ``req``, ``t_ns`` (arrival), and the raw bytes as ``data`` (exact text) or
    ``b64`` when the bytes are not valid UTF-8 on their own.
``end``
    ``req``, ``t_ns``, ``usage`` (the final usage object, or null), ``error``
    (null when the stream completed), ``chunks`` and ``bytes`` counts.
``event``
    ``t_ns``, ``type`` (``tool_call``, ``tool_result``, ``approval``, ``undo``,
    ...) and ``data``: what the agent did between requests.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkcode.agent import TASK_HEADER

FORMAT_VERSION = 2
SUFFIX = ".jsonl"
KINDS: frozenset[str] = frozenset({"header", "request", "response", "chunk", "end", "event"})


def encode_bytes(data: bytes, text_key: str, b64_key: str) -> dict[str, str]:
    """Exact bytes as JSON: readable text when possible, base64 otherwise."""
    try:
        return {text_key: data.decode("utf-8")}
    except UnicodeDecodeError:
        return {b64_key: base64.b64encode(data).decode("ascii")}


def decode_bytes(record: dict[str, Any], text_key: str, b64_key: str) -> bytes:
    if b64_key in record:
        return base64.b64decode(record[b64_key], validate=True)
    value = record.get(text_key, "")
    if not isinstance(value, str):
        raise ValueError(f"{text_key!r} must be a string")
    return value.encode("utf-8")


@dataclass
class Chunk:
    """One piece of a response body as it arrived."""

    t_ns: int
    data: bytes


@dataclass
class Exchange:
    """One HTTP request and its (possibly partial) response."""

    index: int
    t_ns: int
    method: str
    url: str
    request_headers: list[tuple[str, str]]
    body: bytes
    status: int | None = None
    response_t_ns: int | None = None
    response_headers: list[tuple[str, str]] = field(default_factory=list)
    chunks: list[Chunk] = field(default_factory=list)
    end_t_ns: int | None = None
    usage: dict[str, Any] | None = None
    error: str | None = None
    complete: bool = False
    """True once the ``end`` record was read and the stream had no error."""

    @property
    def body_json(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.body)
        except (ValueError, UnicodeDecodeError):
            return None
        return data if isinstance(data, dict) else None

    @property
    def path(self) -> str:
        """The URL path below the API base, e.g. ``/chat/completions``."""
        from urllib.parse import urlsplit

        path = urlsplit(self.url).path
        return path[path.find("/v1") + 3 :] if "/v1/" in path else path

    @property
    def response_bytes(self) -> bytes:
        return b"".join(c.data for c in self.chunks)

    @property
    def task(self) -> str | None:
        """The ``task`` call whose sub-conversation sent this request (its
        ``X-Sparkcode-Task`` header); None for the conversation's own requests."""
        for key, value in self.request_headers:
            if key.lower() == TASK_HEADER.lower():
                return value
        return None

    def response_header(self, name: str) -> str | None:
        lower = name.lower()
        for key, value in self.response_headers:
            if key.lower() == lower:
                return value
        return None


@dataclass
class SessionEvent:
    """Something the agent did: a tool call, its result, an approval, an undo."""

    t_ns: int
    type: str
    data: dict[str, Any]


@dataclass
class LoadProblem:
    """A line of a session file that could not be used."""

    path: Path
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


@dataclass
class Session:
    """A loaded session file."""

    path: Path
    header: dict[str, Any]
    exchanges: list[Exchange] = field(default_factory=list)
    events: list[SessionEvent] = field(default_factory=list)
    problems: list[LoadProblem] = field(default_factory=list)
    truncated_tail: bool = False
    """The last line was cut short (a crash mid-write) and was left out."""

    @property
    def id(self) -> str:
        value = self.header.get("session_id")
        return value if isinstance(value, str) else self.path.stem

    @property
    def engine(self) -> dict[str, Any]:
        value = self.header.get("engine")
        return value if isinstance(value, dict) else {}

    @property
    def t0_ns(self) -> int:
        value = self.header.get("t0_ns")
        if isinstance(value, int):
            return value
        return self.exchanges[0].t_ns if self.exchanges else 0

    def timeline(self) -> list[Exchange | SessionEvent]:
        """Exchanges and events in the order they happened."""
        items: list[Exchange | SessionEvent] = [*self.exchanges, *self.events]
        items.sort(key=lambda item: item.t_ns)
        return items
