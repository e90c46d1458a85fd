"""A recorded session's transcript, read through playback (``sessions export``,
``/export``): the events ``replay --play`` and the TUI's ``/sessions`` show, drawn
by :func:`sparkcode.sessions.export.render_transcript`."""

from __future__ import annotations

from sparkcode.agent.core.events import Event
from sparkcode.sessions import Session
from sparkcode.sessions.export import TranscriptFormat, render_transcript

from ._play import play_events


async def session_transcript(session: Session, fmt: TranscriptFormat) -> str:
    """``session`` played at full speed and rendered as ``fmt`` (``md`` or ``html``)."""
    events: list[Event] = [event async for event in play_events(session, speed=0)]
    return render_transcript(session, events, fmt)
