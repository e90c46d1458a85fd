"""The surface of the agent the TUI drives.

The TUI depends on this protocol, not on the agent's construction, so tests
and the CPU benchmark can drive the real widgets with a scripted agent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol

from sparkcode.agent.events import Event


class AgentPort(Protocol):
    """One conversation with a model: turns, settings, undo."""

    @property
    def model(self) -> str:
        """The model name requests ask for."""

    @property
    def reasoning_effort(self) -> str:
        """``low``, ``high`` or ``max`` (sent as ``reasoning_effort``)."""

    @property
    def thinking_token_budget(self) -> int:
        """Thinking tokens allowed per request."""

    @property
    def approval_mode(self) -> str:
        """``ask``, ``auto-edit`` or ``full-auto``."""

    def set_model(self, name: str) -> None: ...

    def set_reasoning_effort(self, effort: str) -> None: ...

    def set_thinking_token_budget(self, budget: int) -> None: ...

    def set_approval_mode(self, mode: str) -> None: ...

    def run_turn(self, text: str) -> AsyncIterator[Event]:
        """Run one user turn, yielding its events as they happen."""

    def cancel(self) -> None:
        """Ask the running turn to stop at its next frame or tool boundary."""

    async def undo(self) -> str:
        """Restore the workspace to before the last changing turn; say what changed."""

    def reset(self) -> None:
        """Forget the conversation (``/clear``)."""

    async def aclose(self) -> None:
        """Release connections."""


AgentFactory = Callable[[], Awaitable[AgentPort]]
"""Builds the agent once the engine is reachable (it may read ``/v1/models``)."""
