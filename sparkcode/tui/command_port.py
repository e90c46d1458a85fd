"""What a slash-command handler sees of the main screen: :class:`CommandScreen`.

A protocol, not the screen's class: the screen dispatches to the handlers
(``commands.py``), so naming the screen there would close an import circle through
completion and the prompt (the import-rule test forbids any).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from sparkcode.agent.core.events import ApprovalDecision, ApprovalRequested, Event
from sparkcode.agent.extensions.instructions import Instructions
from sparkcode.hooks import TrustStore
from sparkcode.replay import Rebuilt
from sparkcode.sessions import SessionStore

from .agent_port import AgentPort
from .attach import Attachments, Surface


class _ModeShown(Protocol):
    def show_mode(self, mode: str) -> None: ...


class _ModelNamed(Protocol):
    @property
    def model(self) -> str | None: ...


class _EventShown(Protocol):
    async def handle(self, event: Event) -> None: ...


class CommandScreen(Surface, Protocol):
    """What a slash-command handler needs from the screen (the main screen is one).

    A protocol, not the screen's class: the screen dispatches to the handlers, so
    naming the screen here would close an import circle through completion and
    the prompt (the import-rule test forbids any)."""

    workspace: Path
    """Where the agent's tools work."""
    resume: Rebuilt | None
    """The recorded conversation the next agent continues, until it is built."""
    mode_before_plan: str | None
    """The approval mode /plan left, for /act to go back to."""
    agent: AgentPort | None
    """The agent, once built."""
    sessions: SessionStore
    """The recorded sessions (``/export`` finds this one's recording there)."""
    trust: TrustStore
    """The projects trusted to run their hooks (``/trust`` remembers this one)."""

    @property
    def engine_view(self) -> _ModelNamed:
        """The latest engine snapshot (its model, before the agent knows one)."""

    @property
    def instructions(self) -> Instructions: ...

    @property
    def attachments(self) -> Attachments: ...

    @property
    def prompt(self) -> _ModeShown: ...

    @property
    def renderer(self) -> _EventShown: ...

    def with_agent(self, apply: Callable[[AgentPort], None]) -> None: ...

    async def show_markdown(self, text: str) -> None: ...

    def model_changed(self, model: str) -> None: ...

    def workspace_changed(self) -> None: ...

    async def ask(self, request: ApprovalRequested) -> ApprovalDecision: ...

    async def new_conversation(self) -> None: ...

    async def redraw(self) -> None: ...

    async def open_sessions(self) -> None: ...

    def action_toggle_engine(self) -> None: ...

    def send(self, text: str) -> None: ...


__all__ = ["CommandScreen"]
