"""A call's hooks are shown on its tool card; the others as notices."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engine.paths import Paths
from sparkcode.agent.core import events as ev
from sparkcode.hooks import TrustStore
from sparkcode.start import SessionOptions, build_session, resolve_target
from sparkcode.tui import SparkcodeApp, TuiSettings
from sparkcode.tui.agent_adapter import LiveAgent
from sparkcode.tui.agent_port import AgentPort, SessionRequest
from sparkcode.tui.screens.confirm import ConfirmScreen
from sparkcode.tui.scripted import ScriptedAgent, ScriptedEngine
from sparkcode.tui.trusting import trust_asker
from sparkcode.tui.widgets import Notice, ToolCard
from tests.support.scripted import Reply, ScriptedServer

from .conftest import READY
from .test_conversation_commands import app_with
from .test_pilot import texts, type_line, until


async def _hooked(agent: ScriptedAgent, text: str) -> AsyncIterator[ev.Event]:
    yield ev.TurnStarted(turn=1, user_text=text)
    yield ev.HookRan(
        hook_event="UserPromptSubmit",
        command="./check-prompt",
        source="config",
        exit_code=0,
        stdout="",
        stderr="",
    )
    yield ev.ToolCallStarted(
        call_id="c1", name="bash", arguments={"command": "rm -rf /"}, raw_arguments="{}"
    )
    yield ev.HookRan(
        hook_event="PreToolUse",
        command="./guard.sh",
        source="config",
        exit_code=2,
        stdout="",
        stderr="no rm -rf",
        blocked=True,
        call_id="c1",
        tool="bash",
    )
    yield ev.ToolCallFinished(
        call_id="c1", name="bash", result="not run: no rm -rf", error="blocked"
    )
    yield ev.TurnFinished(
        reason="stop", content="", requests=1, prompt_tokens=1, completion_tokens=1
    )


async def test_hook_runs_are_shown_on_the_card_and_as_notices(
    workspace: Path, paths: Paths
) -> None:
    app, _ = app_with(workspace, paths, ScriptedAgent([_hooked]))
    async with app.run_test(size=(100, 36)) as pilot:
        await type_line(pilot, "clean up")
        await until(
            pilot,
            lambda: (
                bool(app.main.query(ToolCard)) and bool(app.main.query_one(ToolCard).hook_lines)
            ),
        )
        card = app.main.query_one(ToolCard)
        assert card.hook_lines == ["PreToolUse hook `./guard.sh` blocked: no rm -rf"]
        await until(
            pilot,
            lambda: any(
                "UserPromptSubmit hook `./check-prompt` ok" in t for t in texts(app, Notice)
            ),
        )


def _trusting_app(workspace: Path, paths: Paths, server: ScriptedServer) -> SparkcodeApp:
    """The real session builder under the app, asking the trust question on screen."""
    target = resolve_target(workspace, paths, endpoint="http://engine.test/v1")
    built: list[SparkcodeApp] = []

    async def factory(request: SessionRequest) -> AgentPort:
        return LiveAgent(
            await build_session(
                target,
                SessionOptions(
                    origin="tui",
                    start_engine=False,
                    transport=server.transport(),
                    mcp=False,
                    permission_mode="full-auto",
                    ask_trust=trust_asker(lambda: built[0]),
                ),
                paths,
            )
        )

    app = SparkcodeApp(
        TuiSettings(workspace=workspace, paths=paths, model="m"),
        ScriptedEngine(current=READY),
        factory,
    )
    built.append(app)
    return app


@pytest.mark.parametrize("answer", ["y", "n"])
async def test_the_first_prompt_asks_once_whether_to_trust_the_project_hooks(
    workspace: Path, paths: Paths, answer: str
) -> None:
    (workspace / ".sparkcode").mkdir()
    (workspace / ".sparkcode" / "hooks.toml").write_text(
        '[[UserPromptSubmit]]\ncommand = "echo from-the-project-hook"\n'
    )
    server = ScriptedServer([Reply(content=["one"]), Reply(content=["two"])])
    app = _trusting_app(workspace, paths, server)
    async with app.run_test(size=(100, 36)) as pilot:
        await type_line(pilot, "hello")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "echo from-the-project-hook" in app.screen.question  # type: ignore[attr-defined]
        await pilot.press(answer)
        await until(pilot, lambda: len(server.requests) == 1)
    sent = server.requests[0]["messages"][-1]["content"]
    trusted = TrustStore(paths.state_dir).is_trusted(workspace)
    if answer == "y":
        assert sent == "hello\n\nfrom-the-project-hook" and trusted
    else:
        assert sent == "hello" and not trusted
