"""Session recording: one append-only JSONL file per agent session.

Recording happens in one place, :class:`RecordingTransport`, an httpx
transport under the agent's client. See :mod:`sparkcode.sessions._records`
for the file format.
"""

from __future__ import annotations

from ._agent import event_recorder, start_recording
from ._blobs import BlobStore, blobs_dir, copy_blobs
from ._fingerprint import engine_fingerprint, model_revision
from ._load import SessionFileError, load_session
from ._recorder import SessionRecorder, new_session_id
from ._records import FORMAT_VERSION, Chunk, Exchange, LoadProblem, Session, SessionEvent
from ._redact import REDACTED, Redactor, secret_values_from_env
from ._sse import (
    Piece,
    TurnOutput,
    exchange_output,
    is_model_call,
    is_streamed,
    model_turns_count,
    parse_output,
    sse_events,
)
from ._store import SessionStore, SessionSummary, quick_summary, summarize
from ._transport import RecordingTransport, find_usage

__all__ = [
    "BlobStore",
    "blobs_dir",
    "copy_blobs",
    "FORMAT_VERSION",
    "REDACTED",
    "Chunk",
    "Exchange",
    "LoadProblem",
    "Piece",
    "RecordingTransport",
    "Redactor",
    "Session",
    "SessionEvent",
    "SessionFileError",
    "SessionRecorder",
    "SessionStore",
    "SessionSummary",
    "TurnOutput",
    "engine_fingerprint",
    "event_recorder",
    "start_recording",
    "exchange_output",
    "find_usage",
    "is_model_call",
    "is_streamed",
    "load_session",
    "model_revision",
    "model_turns_count",
    "new_session_id",
    "parse_output",
    "quick_summary",
    "secret_values_from_env",
    "sse_events",
    "summarize",
]
