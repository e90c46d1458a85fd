"""Read a session file back, tolerating damage.

A line that is not a valid record becomes a :class:`LoadProblem` naming the
file and line, and loading goes on with the next line. A last line without its
newline is what a crash mid-write leaves: it is dropped quietly (the session
is marked ``truncated_tail``) unless it happens to be a whole record.
"""

from __future__ import annotations

import binascii
import json
from pathlib import Path
from typing import Any

from engine.errors import UserError

from ._blobs import BlobError, blobs_dir, restore_images
from ._records import KINDS, Chunk, Exchange, LoadProblem, Session, SessionEvent, decode_bytes


class SessionFileError(UserError):
    """A session file cannot be read at all."""


def _pairs(value: Any) -> list[tuple[str, str]]:
    if not isinstance(value, list):
        raise ValueError("headers must be a list of [name, value] pairs")
    out: list[tuple[str, str]] = []
    for item in value:
        pair_ok = isinstance(item, list) and len(item) == 2
        if not (pair_ok and all(isinstance(x, str) for x in item)):
            raise ValueError("headers must be a list of [name, value] pairs")
        out.append((item[0], item[1]))
    return out


def _int(record: dict[str, Any], key: str) -> int:
    value = record.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"field {key!r} must be an integer")
    return value


class _Builder:
    def __init__(self, path: Path) -> None:
        self.session = Session(path=path, header={})
        self.by_index: dict[int, Exchange] = {}
        self.blob_problem: str | None = None
        """Set by :meth:`add` when a request's images could not be put back."""

    def _exchange(self, record: dict[str, Any]) -> Exchange:
        index = _int(record, "req")
        exchange = self.by_index.get(index)
        if exchange is None:
            raise ValueError(f"refers to request {index}, which has no request record")
        return exchange

    def add(self, record: dict[str, Any]) -> None:
        kind = record.get("kind")
        if kind not in KINDS:
            raise ValueError(f"unknown record kind {kind!r}")
        if kind == "header":
            if self.session.header:
                raise ValueError("a second header record")
            self.session.header = record
        elif kind == "request":
            index = _int(record, "req")
            if index in self.by_index:
                raise ValueError(f"request {index} recorded twice")
            body = decode_bytes(record, "body", "body_b64")
            if "blobs" in record:
                try:
                    body = restore_images(body, record["blobs"], blobs_dir(self.session.path))
                except BlobError as exc:
                    self.blob_problem = f"request {index}: {exc}"
            exchange = Exchange(
                index=index,
                t_ns=_int(record, "t_ns"),
                method=str(record.get("method", "POST")),
                url=str(record.get("url", "")),
                request_headers=_pairs(record.get("headers", [])),
                body=body,
            )
            self.by_index[index] = exchange
            self.session.exchanges.append(exchange)
        elif kind == "response":
            exchange = self._exchange(record)
            exchange.status = _int(record, "status")
            exchange.response_t_ns = _int(record, "t_ns")
            exchange.response_headers = _pairs(record.get("headers", []))
        elif kind == "chunk":
            exchange = self._exchange(record)
            exchange.chunks.append(Chunk(_int(record, "t_ns"), decode_bytes(record, "data", "b64")))
        elif kind == "end":
            exchange = self._exchange(record)
            exchange.end_t_ns = _int(record, "t_ns")
            usage = record.get("usage")
            exchange.usage = usage if isinstance(usage, dict) else None
            error = record.get("error")
            exchange.error = error if isinstance(error, str) else None
            exchange.complete = exchange.error is None
        else:
            data = record.get("data", {})
            if not isinstance(data, dict):
                raise ValueError("event data must be an object")
            self.session.events.append(
                SessionEvent(_int(record, "t_ns"), str(record.get("type", "")), data)
            )


def load_session(path: Path) -> Session:
    """Load ``path``; bad lines are reported in ``session.problems``, not raised."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise SessionFileError(f"session file {path} does not exist") from None
    except OSError as exc:
        raise SessionFileError(f"cannot read session file {path}: {exc.strerror}") from None
    # A file whose writer died before closing it ends in reserved zero bytes.
    raw = raw.rstrip(b"\x00")
    builder = _Builder(path)
    lines = raw.split(b"\n")
    # After the final newline split() leaves b""; anything else there is a cut line.
    last_cut = lines[-1] != b""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        is_last_cut = last_cut and number == len(lines)
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
            builder.add(record)
            if builder.blob_problem is not None:
                builder.session.problems.append(LoadProblem(path, number, builder.blob_problem))
                builder.blob_problem = None
        except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
            if is_last_cut:
                builder.session.truncated_tail = True
                continue
            message = _describe(exc)
            builder.session.problems.append(LoadProblem(path, number, message))
    session = builder.session
    if not session.header:
        if not session.exchanges and not session.events:
            raise SessionFileError(f"{path} is not a sparkcode session file (no header record)")
        session.problems.insert(0, LoadProblem(path, 1, "no header record; using the file name"))
        session.header = {"session_id": path.stem}
    return session


def _describe(exc: Exception) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"corrupt line skipped: invalid JSON ({exc.msg} at column {exc.colno})"
    return f"corrupt line skipped: {exc}"
