"""Messages the TUI's parts send each other (widget-local ones live in their widget)."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from .widgets.engine_panel import EngineView


@dataclass
class EngineViewUpdated(Message):
    """A fresh engine snapshot from the polling thread."""

    view: EngineView


@dataclass
class EngineProgress(Message):
    """A line of progress while the engine is being prepared or launched."""

    text: str


@dataclass
class EngineActionFailed(Message):
    """Start or stop failed; ``error`` says why."""

    action: str
    error: str


@dataclass
class EngineBecameReady(Message):
    """The managed engine just turned healthy (a queued prompt may go now)."""

    base_url: str


@dataclass
class EnginePanelToggled(Message):
    """The main screen showed or hid the engine panel (shown: poll more often)."""

    shown: bool


@dataclass
class AgentModelChanged(Message):
    """The agent connected, or ``/model`` chose another model."""

    model: str


@dataclass
class AttentionNeeded(Message):
    """A turn ended or an approval waits: the user may be in another window."""

    text: str
