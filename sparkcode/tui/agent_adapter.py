"""Connects the TUI to the real agent: builds it against an endpoint and adapts it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from engine.errors import UserError
from engine.paths import Paths
from sparkcode.agent import Agent, AgentSettings, ChatClient, MetricsPoller, Permissions, UndoStore
from sparkcode.agent.events import Event
from sparkcode.config import PERMISSION_MODES, load_config
from sparkcode.sessions import SessionRecorder, event_recorder, start_recording


class ConnectError(UserError):
    """The endpoint could not be reached or named no model."""


@dataclass(frozen=True)
class AgentTarget:
    """Where the agent sends requests and with which defaults."""

    base_url: str
    workspace: Path
    model: str | None = None
    """None: ask the server's /v1/models and take the first."""
    api_key_env: str | None = None
    reasoning_effort: str = "low"
    thinking_token_budget: int = 1536


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
    """Build the agent for ``target``: model and context limit from /v1/models.

    The session is recorded (``sparkcode/sessions``) through the client's
    transport, so ``/sessions`` can play it back later.
    """
    recorder, transport = start_recording(
        target.base_url, workspace=target.workspace, model=target.model, paths=paths,
        api_key_env=target.api_key_env, origin="tui",
    )
    client = ChatClient(target.base_url, target.model or "", target.api_key_env,
                        transport=transport)
    try:
        cards = await client.list_models()
    except Exception as exc:  # any transport or HTTP failure
        await client.aclose()
        recorder.close()
        raise ConnectError(f"cannot list models at {target.base_url}: {exc}") from None
    card = next((c for c in cards if c.id == target.model), None)
    if target.model is None:
        if not cards:
            await client.aclose()
            recorder.close()
            raise ConnectError(f"{target.base_url} serves no model; pass --model")
        card = cards[0]
        client.model = card.id
    config = load_config(paths)
    settings = AgentSettings(
        reasoning_effort=config.reasoning_effort or target.reasoning_effort,
        thinking_token_budget=(config.thinking_token_budget
                               if config.thinking_token_budget is not None
                               else target.thinking_token_budget),
        max_turns=config.max_turns, bash_timeout_s=config.bash_timeout_s,
        context_limit=card.max_model_len if card is not None else None,
    )
    agent = Agent(
        client, target.workspace, settings=settings, permissions=Permissions(config),
        undo=UndoStore(target.workspace, paths.data_dir),
        metrics=MetricsPoller(client.fetch_metrics),
    )
    agent.subscribe(event_recorder(recorder))
    return LiveAgent(agent, recorder)
