"""Connects the TUI to the real agent: the session builder's agent behind :class:`AgentPort`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from engine.paths import Paths
from sparkcode.agent.core.asking import Asker
from sparkcode.agent.core.events import Event
from sparkcode.agent.core.images import ImageAttachment
from sparkcode.config import PERMISSION_MODES
from sparkcode.hooks.session import AskTrust
from sparkcode.operations import AgentOps
from sparkcode.replay import Rebuilt
from sparkcode.start import AgentSession, SessionOptions, StartTarget, build_session


class LiveAgent(AgentOps):
    """:class:`sparkcode.agent.Agent` seen through the TUI's :class:`AgentPort` (the
    settings, ``/context`` and ``/jobs`` as :class:`~sparkcode.operations.AgentOps` has
    them, the same code ACP runs)."""

    def __init__(self, session: AgentSession) -> None:
        super().__init__(session.agent)
        self.session = session
        """What the builder made: agent, connection, recorder."""

    @property
    def model(self) -> str:
        return self.agent.client.model

    @property
    def thinking_history(self) -> bool:
        return self.agent.settings.thinking_history

    @property
    def notes(self) -> list[str]:
        return self.session.notes

    @property
    def session_id(self) -> str | None:
        return self.session.session_id

    def transcript(self) -> list[dict[str, Any]]:
        return list(self.agent.history)

    @property
    def reasoning_effort(self) -> str:
        return self.agent.settings.reasoning_effort

    @property
    def thinking_token_budget(self) -> int:
        return self.agent.settings.thinking_token_budget

    @property
    def approval_mode(self) -> str:
        return self.agent.permissions.mode

    def set_model(self, name: str) -> None:
        self.agent.client.model = name

    def set_approval_mode(self, mode: str) -> str | None:
        if mode not in PERMISSION_MODES:
            raise ValueError(f"unknown approval mode {mode!r}")
        return self.agent.set_mode(mode)

    def load_image(self, path: Path, name: str | None = None) -> ImageAttachment:
        return self.agent.load_image(path, name)

    def run_turn(self, text: str, images: Sequence[ImageAttachment] = ()) -> AsyncIterator[Event]:
        return self.agent.run_turn(text, images)

    def run_shell(self, command: str, serial: int = 0) -> AsyncIterator[Event]:
        return self.agent.run_shell(command, serial)

    def cancel(self) -> None:
        self.agent.cancel()

    def compact(self, focus: str) -> AsyncIterator[Event]:
        return self.agent.compact_now(focus)

    def steer(self, text: str) -> None:
        self.agent.steer(text)

    def take_steering(self) -> list[str]:
        return self.agent.take_steering()

    async def undo(self) -> str:
        event = await asyncio.to_thread(self.agent.undo)
        return undo_text(event.turn, event.messages_removed, event.changed, event.snapshot)

    async def redo(self) -> str:
        event = await asyncio.to_thread(self.agent.redo)
        files = ", ".join(event.changed) if event.changed else "no file changed"
        return (
            f"redo: turn {event.turn} is back ({event.messages_restored} messages); files: {files}"
        )

    def reset(self) -> None:
        self.agent.clear()

    async def aclose(self) -> None:
        await self.session.aclose()


def undo_text(turn: int | None, removed: int, changed: Sequence[str], snapshot: str) -> str:
    """What /undo says it did."""
    files = ", ".join(changed[:8]) + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")
    if turn is None:
        return (
            f"undo: restored {files}"
            if changed
            else "undo: the workspace already matched the snapshot"
        )
    what = (
        f"restored {files}"
        if changed
        else ("the files already matched" if snapshot else "it changed no file")
    )
    return f"undo: turn {turn} taken back ({removed} messages); {what}; /redo brings it back"


async def connect(
    target: StartTarget,
    paths: Paths,
    resume: Rebuilt | None = None,
    ask_trust: AskTrust | None = None,
    asker: Asker | None = None,
) -> LiveAgent:
    """Build the agent for ``target`` with the session builder (model and context
    limit from /v1/models).

    Never starts an engine: the engine panel does that without blocking the
    UI, and the first prompt waits until it is ready. The session is recorded,
    so ``/sessions`` can play it back later. ``asker`` answers ``ask_user`` (the
    app's question card, :mod:`.asking`).
    """
    session = await build_session(
        target,
        SessionOptions(origin="tui", start_engine=False, resume=resume, ask_trust=ask_trust),
        paths,
    )
    session.agent.asker = asker
    return LiveAgent(session)
