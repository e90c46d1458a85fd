"""What an operation may ask of the agent, and that port over the real agent.

:class:`Ops` is the part of the agent the shared operations use. The TUI's
``AgentPort`` (the live agent and its scripted test double) has these methods;
ACP, which holds the :class:`~sparkcode.agent.core.loop.Agent` itself, wraps it in
:class:`AgentOps`.
"""

from __future__ import annotations

from typing import Protocol

from sparkcode.agent.core.context_report import context_report
from sparkcode.agent.core.loop import Agent
from sparkcode.config import DEGENERATE_MODES


class Ops(Protocol):
    """The agent as the shared operations see it."""

    def set_reasoning_effort(self, effort: str) -> None: ...

    def set_thinking_token_budget(self, budget: int) -> None: ...

    def set_degenerate_mode(self, mode: str) -> None: ...

    def set_thinking_history(self, on: bool) -> None: ...

    def context_report(self) -> str: ...

    def jobs_report(self) -> str: ...

    async def stop_job(self, job_id: int) -> str: ...


class AgentOps:
    """:class:`Ops` over the real agent."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def set_reasoning_effort(self, effort: str) -> None:
        self.agent.settings.reasoning_effort = effort

    def set_thinking_token_budget(self, budget: int) -> None:
        self.agent.settings.thinking_token_budget = budget

    def set_degenerate_mode(self, mode: str) -> None:
        if mode not in DEGENERATE_MODES:
            raise ValueError(f"unknown degenerate-stream mode {mode!r}")
        self.agent.settings.degenerate = mode

    def set_thinking_history(self, on: bool) -> None:
        self.agent.settings.thinking_history = on

    def context_report(self) -> str:
        return context_report(self.agent).text()

    def jobs_report(self) -> str:
        return self.agent.jobs.table()

    async def stop_job(self, job_id: int) -> str:
        job = self.agent.jobs.get(job_id)
        await self.agent.jobs.stop(job)
        return job.describe()


__all__ = ["AgentOps", "Ops"]
