"""A recorded session as a readable transcript file (``sessions export --format md|html``,
the TUI's ``/export``).

The events come from replay's playback (``sparkcode.replay.session_transcript``
plays the session and calls :func:`render_transcript`); this module only builds
and draws: :mod:`._transcript` (what is shown, redacted), :mod:`._render_md`,
:mod:`._render_html`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from engine.errors import UserError
from sparkcode.agent.core.events import Event

from ._records import Session
from ._render_html import render_html
from ._render_md import render_markdown
from ._transcript import Transcript, build_transcript, session_redactor

TranscriptFormat = Literal["md", "html"]
TRANSCRIPT_FORMATS: tuple[TranscriptFormat, ...] = ("md", "html")
SUFFIXES: dict[str, str] = {"jsonl": ".jsonl", "md": ".md", "html": ".html"}
"""Every ``sessions export --format`` and its file suffix (``jsonl``: the raw recording)."""


def transcript_format(name: str) -> TranscriptFormat:
    """``name`` as a transcript format, or a :class:`UserError` listing the known ones."""
    for known in TRANSCRIPT_FORMATS:
        if name == known:
            return known
    raise UserError(f"unknown export format {name!r}; known: {', '.join(TRANSCRIPT_FORMATS)}")


def render_transcript(session: Session, events: Iterable[Event], fmt: TranscriptFormat) -> str:
    """The transcript of ``session`` (its played-back ``events``) as ``fmt``."""
    redactor = session_redactor(session)
    transcript: Transcript = build_transcript(session, events, redactor)
    text = render_markdown(transcript) if fmt == "md" else render_html(transcript)
    return redactor.text(text)  # once more over the page: nothing slips through
