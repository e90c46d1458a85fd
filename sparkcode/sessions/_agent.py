"""Connect the recorder to the agent: a recording client and an event subscriber."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from engine.paths import Paths

from ._fingerprint import engine_fingerprint
from ._recorder import SessionRecorder
from ._redact import Redactor
from ._transport import RecordingTransport

if TYPE_CHECKING:
    from sparkcode.agent.core.events import Event

STREAM_EVENTS: frozenset[str] = frozenset({"ContentDelta", "ReasoningDelta", "UsageUpdate"})
"""Events derived from the recorded stream itself: not written twice."""

FSYNC_EVENTS: frozenset[str] = frozenset(
    {"TurnFinished", "ApprovalResolved", "UndoApplied", "AgentError"}
)
HELD_EVENTS: frozenset[str] = frozenset({"ModeChanged"})
"""Events that do not start the file themselves (a mode switched and no prompt sent
leaves no session); held until something does, then written in order."""


def event_recorder(recorder: SessionRecorder) -> Callable[[Event], None]:
    """An ``Agent.subscribe`` callback writing tool calls, results, approvals, undo...
    (a ``task`` call's sub-conversation as ``TaskEvent`` records)."""

    from sparkcode.agent.core.events import TaskEvent, event_to_json

    def on_event(event: Event) -> None:
        kind = event.event_type
        inner = event.event.event_type if isinstance(event, TaskEvent) else kind
        if inner in STREAM_EVENTS or recorder.closed:
            return  # a task's stream is recorded as its own exchanges
        data = event_to_json(event)
        data.pop("type", None)
        recorder.event(kind, data, opens=kind not in HELD_EVENTS)
        if kind in FSYNC_EVENTS:
            recorder.sync()

    return on_event


def start_recording(
    base_url: str,
    *,
    workspace: Path,
    paths: Paths,
    model: str | None = None,
    api_key_env: str | None = None,
    origin: str = "agent",
    inner: httpx.AsyncBaseTransport | None = None,
    on_error: Callable[[OSError], None] | None = None,
    lazy: bool = True,
    extra: Mapping[str, Any] | None = None,
    session_id: str | None = None,
) -> tuple[SessionRecorder, RecordingTransport]:
    """A new session recorder and the transport to give the agent's ``ChatClient``.

    With ``lazy`` (the default) the file appears at the first model request or
    agent event: connecting and quitting without a prompt records nothing.
    ``extra`` goes into the header (sampling seed, parent session...);
    ``session_id`` names the recording (default: a new one), for a front that
    hands the ID out before the session is built (``sparkcode acp``).
    """
    import os

    extra_secrets = []
    if api_key_env and os.environ.get(api_key_env):
        extra_secrets.append(os.environ[api_key_env])
    redactor = Redactor.from_env(extra_secrets)
    fingerprint: dict[str, Any] = engine_fingerprint(
        base_url, paths, model=model, redactor=redactor
    )
    recorder = SessionRecorder(
        paths.sessions_dir,
        workspace=workspace,
        engine=fingerprint,
        redactor=redactor,
        origin=origin,
        on_error=on_error,
        lazy=lazy,
        extra=extra,
        session_id=session_id,
    )
    transport = RecordingTransport(inner or httpx.AsyncHTTPTransport(), recorder)
    return recorder, transport
