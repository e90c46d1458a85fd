"""Choosing a recorded session to continue from the TUI: another workspace only if asked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.app import App

from sparkcode.replay import Rebuilt
from sparkcode.sessions import SessionStore
from sparkcode.start import WorkspaceMismatch, find_resume

from .screens.confirm import ConfirmScreen


async def choose_resume(
    app: App[Any], sessions: SessionStore, workspace: Path, session_id: str
) -> tuple[Rebuilt | None, str]:
    """The conversation to continue, or None and why not (the user said no).

    A session of another workspace is resumed only after the user agreed to
    switch to it (a :class:`ConfirmScreen` naming both directories). Bad IDs
    raise :class:`engine.errors.UserError`. Runs in a worker (it waits on a screen).
    """
    try:
        return await find_resume(sessions, workspace, session_id=session_id), ""
    except WorkspaceMismatch as exc:
        question = (
            f"Session {exc.session_id} was recorded in {exc.recorded}, not in this "
            f"workspace ({exc.current}).\n\nSwitch the workspace to {exc.recorded} "
            "and resume it there?"
        )
        if not await app.push_screen_wait(ConfirmScreen(question)):
            return None, f"not resumed: session {exc.session_id} stays in {exc.recorded}"
        return await find_resume(sessions, workspace, session_id=session_id, any_workspace=True), ""
