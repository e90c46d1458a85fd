"""Write a session file as the session happens.

:class:`SessionRecorder` owns one append-only file; the records come from
:class:`~._transport.RecordingTransport` (every request and response byte) and
from the agent's event subscription (:mod:`._agent`).

Crash safety: each record is appended whole, as one line, to the file's page
cache before the client sees the chunk (:class:`~._appendlog.AppendLog`: a copy
into a shared map of the file, which survives SIGKILL); the file is fsynced at
the end of every exchange and on agent turn boundaries. A kill can cut at most
the line being appended, which the loader drops.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import secrets as _secrets
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from engine.profiles import is_secret_name
from sparkcode import __version__

from ._appendlog import AppendLog, repair_directory
from ._blobs import BlobStore, blobs_dir, cut_images
from ._records import FORMAT_VERSION, SUFFIX, encode_bytes
from ._redact import Redactor

_encode_str: Callable[[str], bytes] = msgspec.json.Encoder().encode
"""A JSON string as UTF-8 bytes, escaped in C: about half the cost of
``json.encoder.encode_basestring`` plus ``str.encode`` (this runs once per chunk)."""

_CHUNK_TEXT = b'{"kind":"chunk","req":%d,"t_ns":%d,"data":%b}\n'
_CHUNK_B64 = b'{"kind":"chunk","req":%d,"t_ns":%d,"b64":"%b"}\n'

_now = time.monotonic_ns

ErrorHandler = Callable[[OSError], None]


def new_session_id() -> str:
    """12 hex digits; shown and typed as a prefix, like a git hash."""
    return _secrets.token_hex(6)


class SessionRecorder:
    """Appends the records of one session to ``<sessions_dir>/<id>.jsonl``."""

    def __init__(
        self,
        sessions_dir: Path,
        *,
        workspace: Path | str,
        engine: Mapping[str, Any],
        redactor: Redactor | None = None,
        session_id: str | None = None,
        origin: str = "agent",
        extra: Mapping[str, Any] | None = None,
        on_error: ErrorHandler | None = None,
        lazy: bool = False,
    ) -> None:
        """``lazy``: create the file only at the first model request or agent event,
        so connecting (which lists models) and quitting leaves no empty session."""
        self.session_id = session_id or new_session_id()
        self.redactor = redactor or Redactor.from_env()
        self._secrets = self.redactor.secrets
        self.on_error = on_error
        self.failed: OSError | None = None
        self._lock = threading.Lock()
        self._next_req = 0
        self.path = sessions_dir / f"{self.session_id}{SUFFIX}"
        self.blobs = BlobStore(blobs_dir(self.path))
        """Attached images, once each (:mod:`._blobs`)."""
        self._log: AppendLog | None = None
        self._closed = False
        self._pending: list[str] | None = [] if lazy else None
        """Lines held until the first model request or agent event (``lazy``)."""
        self.t0_ns = time.monotonic_ns()
        engine = dict(engine)
        if isinstance(engine.get("env"), dict):
            # A secret in the engine's environment is redacted wherever it appears.
            for name, value in engine["env"].items():
                if is_secret_name(str(name)) and isinstance(value, str):
                    self.redactor.add(value)
            engine["env"] = self.redactor.env(engine["env"])
        header: dict[str, Any] = {
            "kind": "header",
            "format": FORMAT_VERSION,
            "session_id": self.session_id,
            "sparkcode_version": __version__,
            "workspace": str(workspace),
            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "t0_ns": self.t0_ns,
            "origin": origin,
            "engine": self._redact_obj(engine),
        }
        if extra:
            header.update(self._redact_obj(dict(extra)))
        self._header_line = _dumps(header)
        # Opening the sessions directory mends the files of sessions killed earlier.
        repair_directory(sessions_dir)
        if not lazy:
            self._open()

    def _open(self) -> None:
        """Create the file and write the header and anything held back."""
        pending, self._pending = self._pending or [], None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Session files hold code and prompts: readable by the owner only (0600).
            self._log = AppendLog(self.path)
        except OSError as exc:
            self._fail(exc)
            return
        self._write("".join([self._header_line, *pending]))
        self.sync()

    # -- low level -------------------------------------------------------------

    def _write(self, line: str, *, opens: bool = True) -> None:
        log = self._log
        if log is not None:
            try:
                log.append(line.encode("utf-8"))
            except OSError as exc:
                self._fail(exc)
            return
        if self._pending is not None:
            self._pending.append(line)
            if opens:
                self._open()

    def _fail(self, exc: OSError) -> None:
        # Recording must never take the agent down: stop recording, report once.
        self.failed = exc
        self.close()
        if self.on_error is not None:
            self.on_error(exc)

    def sync(self) -> None:
        if self._log is None:
            return
        try:
            self._log.sync()
        except OSError as exc:
            self._fail(exc)

    def close(self) -> None:
        self._closed = True
        self._pending = None  # nothing worth a file was recorded
        log, self._log = self._log, None
        if log is not None:
            try:
                log.close()
            except OSError:
                pass  # already reported, or gone: nothing more can be saved

    @property
    def closed(self) -> bool:
        return self._closed or self.failed is not None

    def _redact_obj(self, value: Any) -> Any:
        if not self.redactor.active:
            return value
        if isinstance(value, str):
            return self.redactor.text(value)
        if isinstance(value, dict):
            return {k: self._redact_obj(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._redact_obj(v) for v in value]
        return value

    # -- records ---------------------------------------------------------------

    def request(self, method: str, url: str, headers: list[tuple[str, str]], body: bytes) -> int:
        """Record a request about to be sent; returns its index."""
        with self._lock:
            index = self._next_req
            self._next_req += 1
        record: dict[str, Any] = {
            "kind": "request",
            "req": index,
            "t_ns": time.monotonic_ns(),
            "method": method,
            "url": self.redactor.text(url),
            "headers": self.redactor.headers(headers),
        }
        if self.redactor.active:
            try:
                body = self.redactor.text(body.decode("utf-8")).encode("utf-8")
            except UnicodeDecodeError:
                pass
        try:
            body, refs = cut_images(body, self.blobs)
        except OSError:
            refs = []  # the image stays in the body: bigger, but nothing is lost
        if refs:
            record["blobs"] = refs
        record.update(encode_bytes(body, "body", "body_b64"))
        self._write(_dumps(record), opens=method != "GET")
        return index

    def response(self, index: int, status: int, headers: list[tuple[str, str]]) -> None:
        self._write(
            _dumps(
                {
                    "kind": "response",
                    "req": index,
                    "t_ns": time.monotonic_ns(),
                    "status": status,
                    "headers": self.redactor.headers(headers),
                }
            ),
            opens=False,
        )

    def chunk(self, index: int, data: bytes) -> None:
        """One piece of a response body, stamped on arrival (the hot path: kept lean)."""
        t_ns = _now()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            line = _CHUNK_B64 % (index, t_ns, base64.b64encode(data))
        else:
            if self._secrets:
                text = self.redactor.text(text)
            line = _CHUNK_TEXT % (index, t_ns, _encode_str(text))
        log = self._log
        if log is None:
            self._write(line.decode("utf-8"), opens=False)
            return
        try:
            log.append(line)
        except OSError as exc:
            self._fail(exc)

    def end(self, index: int, *, usage: Any, error: str | None, chunks: int, nbytes: int) -> None:
        self._write(
            _dumps(
                {
                    "kind": "end",
                    "req": index,
                    "t_ns": time.monotonic_ns(),
                    "usage": usage,
                    "error": error,
                    "chunks": chunks,
                    "bytes": nbytes,
                }
            ),
            opens=False,
        )
        self.sync()

    def event(self, type_: str, data: Mapping[str, Any], *, opens: bool = True) -> None:
        """An agent event: tool call, tool result, approval, undo, turn end... Without
        ``opens`` a lazy recorder holds it until a record that opens the file."""
        self._write(
            _dumps(
                {
                    "kind": "event",
                    "t_ns": time.monotonic_ns(),
                    "type": type_,
                    "data": self._redact_obj(_jsonable(dict(data))),
                }
            ),
            opens=opens,
        )


def _dumps(record: Mapping[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


def _jsonable(value: Any) -> Any:
    """Make agent event payloads JSON-safe without losing their content."""
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, Path):
        return str(value)
    return repr(value)
