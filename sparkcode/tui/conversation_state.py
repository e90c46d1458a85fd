"""The conversation the main screen shows, as a plain object the screen owns.

Which workspace the agent works in, the recorded conversation the next agent
continues (until that agent is built), the agent once built, the settings given
before it was (applied once it is, in order) and the approval mode ``/plan`` left
for ``/act``. No Textual here: the screen draws, this object keeps what is drawn
about, so the rules (a setting before the first prompt is not lost; a resumed
recording is handed to exactly one agent) hold without a running app.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sparkcode.replay import Rebuilt

from .agent_port import AgentFactory, AgentPort, SessionRequest


class ConversationState:
    """The agent behind the shown conversation and what it continues."""

    def __init__(
        self, workspace: Path, agent_factory: AgentFactory, resume: Rebuilt | None
    ) -> None:
        self.workspace = workspace
        """Where the agent's tools work (and @path completion looks)."""
        self.agent_factory = agent_factory
        """Builds the agent on the first prompt."""
        self.resume = resume
        """The recorded conversation the next agent continues, until it is built."""
        self.agent: AgentPort | None = None
        """The agent, built on the first prompt (once the engine answers)."""
        self.mode_before_plan: str | None = None
        """The approval mode /plan left, for /act to go back to."""
        self._deferred: list[Callable[[AgentPort], None]] = []

    def with_agent(self, apply: Callable[[AgentPort], None]) -> None:
        """Apply a setting to the agent now, or once it is built."""
        if self.agent is None:
            self._deferred.append(apply)
        else:
            apply(self.agent)

    async def ensure_agent(self) -> tuple[AgentPort, bool]:
        """The agent, and whether it was built just now (the settings given meanwhile
        applied to it, the recording it continues handed over)."""
        if self.agent is not None:
            return self.agent, False
        agent = await self.agent_factory(SessionRequest(self.workspace, self.resume))
        self.resume = None
        for apply in self._deferred:
            apply(agent)
        self._deferred.clear()
        self.agent = agent
        return agent, True

    async def close_agent(self) -> None:
        """Close the agent (a resumed conversation gets a new one on its first prompt)."""
        if self.agent is not None:
            await self.agent.aclose()
            self.agent = None
