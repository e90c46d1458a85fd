"""Connects the TUI to the real agent: builds it against an endpoint and adapts it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from engine.paths import Paths
from engine.profiles import load_profile
from sparkcode.agent import Agent, AgentSettings, MetricsPoller, Permissions, UndoStore
from sparkcode.agent.events import Event
from sparkcode.config import PERMISSION_MODES, load_config
from sparkcode.connection import resolve_connection
from sparkcode.sessions import SessionRecorder, event_recorder, start_recording


@dataclass(frozen=True)
class AgentTarget:
    """What the agent should talk to, as the user asked for it."""

    workspace: Path
    endpoint: str | None = None
    """An explicit server; None: the profile's (its managed engine must be running)."""
    profile: str | None = None
    model: str | None = None
    """None: the server's first model."""
    api_key_env: str | None = None


class LiveAgent:
    """:class:`sparkcode.agent.Agent` seen through the TUI's :class:`AgentPort`."""

    def __init__(self, agent: Agent, recorder: SessionRecorder | None = None) -> None:
        self.agent = agent
        """The wrapped agent."""
        self.recorder = recorder
        """Records the session (requests, stream bytes, tool events), if any."""

    @property
    def model(self) -> str:
        return self.agent.client.model

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

    def set_reasoning_effort(self, effort: str) -> None:
        self.agent.settings.reasoning_effort = effort

    def set_thinking_token_budget(self, budget: int) -> None:
        self.agent.settings.thinking_token_budget = budget

    def set_approval_mode(self, mode: str) -> None:
        if mode not in PERMISSION_MODES:
            raise ValueError(f"unknown approval mode {mode!r}")
        self.agent.permissions.mode = mode

    def run_turn(self, text: str) -> AsyncIterator[Event]:
        return self.agent.run_turn(text)

    def cancel(self) -> None:
        self.agent.cancel()

    async def undo(self) -> str:
        event = await asyncio.to_thread(self.agent.undo)
        if not event.changed:
            return "undo: the workspace already matched the snapshot"
        return "undo: restored " + ", ".join(event.changed)

    def reset(self) -> None:
        self.agent.clear()

    async def aclose(self) -> None:
        await self.agent.client.aclose()
        if self.recorder is not None:
            self.recorder.close()


async def connect(target: AgentTarget, paths: Paths) -> LiveAgent:
    """Build the agent for ``target`` (model and context limit from /v1/models).

    Never starts an engine: the engine panel does that without blocking the
    UI, and the first prompt waits until it is ready. The session is recorded
    (``sparkcode.sessions``) through the client's transport, so ``/sessions``
    can play it back later.
    """
    conn = await resolve_connection(
        endpoint=target.endpoint, model=target.model, api_key_env=target.api_key_env,
        profile=target.profile, paths=paths, start_engine=False,
    )
    recorder, transport = start_recording(
        conn.base_url, workspace=target.workspace, model=conn.model, paths=paths,
        api_key_env=conn.api_key_env, origin="tui",
    )
    config = load_config(paths)
    settings = AgentSettings(
        reasoning_effort=conn.reasoning_effort,
        thinking_token_budget=_budget_for(conn.profile, conn.managed, conn.thinking_token_budget,
                                          paths),
        max_turns=config.max_turns, bash_timeout_s=config.bash_timeout_s,
        context_limit=conn.max_model_len,
    )
    client = conn.client(transport)
    agent = Agent(
        client, target.workspace, settings=settings, permissions=Permissions(config),
        undo=UndoStore(target.workspace, paths.data_dir),
        metrics=MetricsPoller(client.fetch_metrics),
    )
    agent.subscribe(event_recorder(recorder))
    return LiveAgent(agent, recorder)


def _budget_for(profile: str | None, managed: bool, budget: int, paths: Paths) -> int:
    """The thinking budget to send; -1 (not sent) when our own engine cannot honour it.

    vLLM rejects ``thinking_token_budget`` mid-stream when it runs without a
    reasoning parser or config (the cpu-demo profile), and every turn would
    fail; an endpoint we do not run is left to the client's own fallback.
    """
    if not managed or profile is None:
        return budget
    prof = load_profile(profile, paths)
    if prof.reasoning_parser is None and prof.reasoning_config is None:
        return -1
    return budget
