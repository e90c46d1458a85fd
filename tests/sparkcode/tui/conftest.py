"""Builders for a SparkcodeApp driven by a scripted agent and engine."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from engine.paths import Paths
from engine.supervisor import EngineStatus
from sparkcode.config import PermissionMode
from sparkcode.start import SessionOptions, build_session, resolve_target
from sparkcode.tui import SparkcodeApp, TuiSettings
from sparkcode.tui.agent_adapter import LiveAgent
from sparkcode.tui.agent_port import AgentPort, SessionRequest
from sparkcode.tui.scripted import ScriptedAgent, ScriptedEngine, TurnScript
from tests.support.scripted import ScriptedServer

READY = EngineStatus(
    state="ready",
    pid=1234,
    port=8400,
    profile="cpu-demo",
    model="smollm2-135m-instruct",
    healthy=True,
    base_url="http://127.0.0.1:8400/v1",
    memory_rss_bytes=3 * 2**30,
)


def make_app(
    workspace: Path,
    scripts: list[TurnScript] | None = None,
    *,
    engine: ScriptedEngine | None = None,
    auto_start: bool = False,
    show_engine_panel: bool = False,
) -> tuple[SparkcodeApp, ScriptedAgent, ScriptedEngine]:
    """An app over a scripted agent; the engine is ready unless given."""
    agent = ScriptedAgent(list(scripts or []))
    engine = engine or ScriptedEngine(current=READY)

    async def factory(request: SessionRequest) -> AgentPort:
        return agent

    # The directories each test's SPARKCODE_HOME gives (tests/conftest.py).
    settings = TuiSettings(
        workspace=workspace,
        paths=Paths.from_env(),
        model="smollm2-135m-instruct",
        auto_start=auto_start,
        poll_s=0.1,
        idle_poll_s=0.1,
        show_engine_panel=show_engine_panel,
    )
    return SparkcodeApp(settings, engine, factory), agent, engine


def live_app(
    workspace: Path,
    paths: Paths,
    server: ScriptedServer,
    *,
    vision: bool = False,
    permission_mode: PermissionMode = "full-auto",
) -> SparkcodeApp:
    """An app over the real agent (session builder, tools, loop) whose model is the
    scripted OpenAI server: what a request body holds is what the user sent.
    ``vision``: the endpoint's model takes images (``--vision``)."""
    target = resolve_target(workspace, paths, endpoint="http://engine.test/v1", vision=vision)

    async def factory(request: SessionRequest) -> AgentPort:
        return LiveAgent(
            await build_session(
                target,
                SessionOptions(
                    origin="tui",
                    start_engine=False,
                    transport=server.transport(),
                    mcp=False,
                    permission_mode=permission_mode,
                ),
                paths,
            )
        )

    return SparkcodeApp(
        TuiSettings(workspace=workspace, paths=paths, model="m"),
        ScriptedEngine(current=READY),
        factory,
    )


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "main.py").write_text("print('hi')\n")
    (ws / "src" / "util.py").write_text("x = 1\n")
    (ws / "README.md").write_text("# demo\n")
    return ws


@pytest.fixture
def app_factory(
    workspace: Path,
) -> Callable[..., tuple[SparkcodeApp, ScriptedAgent, ScriptedEngine]]:
    def build(
        scripts: list[TurnScript] | None = None, **kwargs: object
    ) -> tuple[SparkcodeApp, ScriptedAgent, ScriptedEngine]:
        return make_app(workspace, scripts, **kwargs)  # type: ignore[arg-type]

    return build
