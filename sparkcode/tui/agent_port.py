"""The surface of the agent the TUI drives.

The TUI depends on this protocol, not on the agent's construction, so tests
and the CPU benchmark can drive the real widgets with a scripted agent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sparkcode.agent.core.events import Event
from sparkcode.agent.core.images import ImageAttachment
from sparkcode.replay import Rebuilt


class AgentPort(Protocol):
    """One conversation with a model: turns, settings, undo."""

    @property
    def model(self) -> str:
        """The model name requests ask for."""

    @property
    def reasoning_effort(self) -> str:
        """One of ``sparkcode.operations.EFFORTS`` (sent as ``reasoning_effort``)."""

    @property
    def thinking_token_budget(self) -> int:
        """Thinking tokens allowed per request."""

    @property
    def approval_mode(self) -> str:
        """The permission mode: ``sandbox``, ``ask``, ``auto-edit``, ``full-auto``, ``plan``."""

    @property
    def thinking_history(self) -> bool:
        """Reasoning is sent back within a turn's tool loop (``/thinking-history``)."""

    @property
    def notes(self) -> Sequence[str]:
        """What the builder wants the user to know (instructions cut, resume notes)."""

    @property
    def session_id(self) -> str | None:
        """The recording's ID (None: not recorded)."""

    def set_model(self, name: str) -> None: ...

    def set_reasoning_effort(self, effort: str) -> None: ...

    def set_thinking_token_budget(self, budget: int) -> None: ...

    def set_approval_mode(self, mode: str) -> str | None:
        """Switch mode; returns why another one is used instead (no sandbox here)."""

    def set_thinking_history(self, on: bool) -> None: ...

    def set_degenerate_mode(self, mode: str) -> None: ...

    def load_image(self, path: Path, name: str | None = None) -> ImageAttachment:
        """Read an image for the next message (``path`` relative to the workspace);
        ``ImageError`` names the problem (text-only model, not an image, too big)."""

    def run_turn(self, text: str, images: Sequence[ImageAttachment] = ()) -> AsyncIterator[Event]:
        """Run one user turn (``images`` go with its message), yielding its events."""

    def run_shell(self, command: str, serial: int = 0) -> AsyncIterator[Event]:
        """``!cmd``: run the user's shell command under the shell tool's rules (sandbox,
        approval), yielding its events; its output goes with the next message.
        ``ValueError`` for an empty command."""

    def cancel(self) -> None:
        """Ask the running turn to stop at its next frame or tool boundary."""

    def steer(self, text: str) -> None:
        """Give the running turn a user message at its next safe point (after the
        current tool results); delivery shows as a ``SteerDelivered`` event."""

    def take_steering(self) -> list[str]:
        """Steered messages the turn ended before delivering (emptied)."""

    def compact(self, focus: str) -> AsyncIterator[Event]:
        """``/compact``: summarise the conversation now (``focus``: what to keep)."""

    def context_report(self) -> str:
        """``/context``: the context window by part, as Markdown."""

    def jobs_report(self) -> str:
        """``/jobs``: the background jobs (state, pid, command), as Markdown."""

    async def stop_job(self, job_id: int) -> str:
        """``/jobs stop N``: end job N and its processes; its state after."""

    async def undo(self) -> str:
        """Undo the last turn (its files and its messages); say what changed."""

    async def redo(self) -> str:
        """Bring the last undone turn back; say what changed."""

    def transcript(self) -> list[dict[str, Any]]:
        """The conversation as OpenAI messages (what the screen re-draws after undo)."""

    def reset(self) -> None:
        """Forget the conversation (``/clear``)."""

    async def aclose(self) -> None:
        """Release connections."""


@dataclass(frozen=True)
class SessionRequest:
    """Which conversation the factory should build the agent for."""

    workspace: Path | None = None
    """None: the workspace the app was started in."""
    resume: Rebuilt | None = None
    """A recorded conversation to continue; None: a new one."""


AgentFactory = Callable[[SessionRequest], Awaitable[AgentPort]]
"""Builds the agent once the engine is reachable (it may read ``/v1/models``)."""
