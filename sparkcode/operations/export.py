"""``/export [md|html] [PATH]``: the current session's transcript written to a file
(both fronts: the TUI's ``/export`` and ACP's).

The session is the agent's recording, or, before the agent is built, the
recorded session the conversation resumes. The transcript is the one
``sparkcode sessions export --format md|html`` writes (``sparkcode.replay.
session_transcript``). Without PATH it goes beside the recording, as
``<sessions>/<ID>.md`` (or ``.html``), and is overwritten by the next ``/export``;
a PATH (relative to the workspace) that is a directory gets ``<ID>.md`` in it,
and an existing file there is refused rather than overwritten.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Protocol

from engine.errors import UserError
from sparkcode.replay import Rebuilt, session_transcript
from sparkcode.sessions import SessionStore, load_session
from sparkcode.sessions.export import SUFFIXES, TRANSCRIPT_FORMATS, TranscriptFormat

from ._builtin import EXPORT_USAGE as USAGE


class _Recorded(Protocol):
    @property
    def session_id(self) -> str | None:
        """The recording's ID (None: not recorded)."""


class ExportScreen(Protocol):
    """What ``/export`` needs from the front (the TUI's screen, ACP's session)."""

    @property
    def workspace(self) -> Path: ...

    @property
    def sessions(self) -> SessionStore: ...

    @property
    def agent(self) -> _Recorded | None:
        """The agent (or session) whose recording is exported, once built."""

    @property
    def resume(self) -> Rebuilt | None: ...


def parse_export(arg: str, workspace: Path) -> tuple[TranscriptFormat, Path | None]:
    """The format and the PATH given (None: the default place); a word that is
    neither a format nor a path is refused by name."""
    word, _, rest = arg.strip().partition(" ")
    if word in TRANSCRIPT_FORMATS:
        fmt: TranscriptFormat = "md" if word == "md" else "html"
        return fmt, _path(rest.strip(), workspace)
    if not word:
        return "md", None
    path = _path(arg.strip(), workspace)
    assert path is not None
    if path.suffix in (".html", ".htm"):
        return "html", path
    if path.suffix == ".md" or path.is_dir() or "/" in arg:
        return "md", path
    raise UserError(
        f"unknown format {word!r} (md or html), or give a PATH ending in .md or "
        f".html; usage: {USAGE}"
    )


def _path(text: str, workspace: Path) -> Path | None:
    if not text:
        return None
    path = Path(text.strip("'\"")).expanduser()
    return path if path.is_absolute() else workspace / path


def current_session(screen: ExportScreen) -> str:
    session_id = screen.agent.session_id if screen.agent is not None else None
    if session_id is None and screen.agent is None and screen.resume is not None:
        session_id = screen.resume.session_id
    if session_id is None:
        raise UserError(
            "nothing recorded yet: /export writes the session once a prompt "
            "has been sent (or a recorded session is resumed)"
        )
    return session_id


async def export_transcript(screen: ExportScreen, arg: str) -> str:
    """Write the transcript; the sentence that says where."""
    fmt, path = parse_export(arg, screen.workspace)
    session_id = current_session(screen)
    source = screen.sessions.resolve(session_id)
    session = await asyncio.to_thread(load_session, source)
    text = await session_transcript(session, fmt)
    name = f"{session.id}{SUFFIXES[fmt]}"
    if path is None:
        path = source.with_name(name)  # the default place: each /export refreshes it
    else:
        path = path / name if path.is_dir() else path
        if path.exists():
            raise UserError(f"{path} exists; give another PATH")
    try:
        await asyncio.to_thread(path.write_text, text, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror}") from None
    return f"exported the transcript of session {session.id} ({fmt}) to {path}"


__all__ = ["USAGE", "ExportScreen", "current_session", "export_transcript", "parse_export"]
