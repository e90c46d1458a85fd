"""A call's hooks are shown on its tool card; the others as notices."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

from engine.paths import Paths
from sparkcode.agent import events as ev
from sparkcode.tui.scripted import ScriptedAgent
from sparkcode.tui.widgets import Notice, ToolCard

from .test_conversation_commands import app_with
from .test_pilot import texts, type_line, until


async def _hooked(agent: ScriptedAgent, text: str) -> AsyncIterator[ev.Event]:
    yield ev.TurnStarted(turn=1, user_text=text)
    yield ev.HookRan(hook_event="UserPromptSubmit", command="./check-prompt", source="config",
                     exit_code=0, stdout="", stderr="")
    yield ev.ToolCallStarted(call_id="c1", name="bash", arguments={"command": "rm -rf /"},
                             raw_arguments="{}")
    yield ev.HookRan(hook_event="PreToolUse", command="./guard.sh", source="config",
                     exit_code=2, stdout="", stderr="no rm -rf", blocked=True, call_id="c1",
                     tool="bash")
    yield ev.ToolCallFinished(call_id="c1", name="bash", result="not run: no rm -rf",
                              error="blocked")
    yield ev.TurnFinished(reason="stop", content="", requests=1, prompt_tokens=1,
                          completion_tokens=1)


async def test_hook_runs_are_shown_on_the_card_and_as_notices(workspace: Path,
                                                              paths: Paths) -> None:
    app, _ = app_with(workspace, paths, ScriptedAgent([_hooked]))
    async with app.run_test(size=(100, 36)) as pilot:
        await type_line(pilot, "clean up")
        await until(pilot, lambda: bool(app.main.query(ToolCard))
                    and bool(app.main.query_one(ToolCard).hook_lines))
        card = app.main.query_one(ToolCard)
        assert card.hook_lines == ["PreToolUse hook `./guard.sh` blocked: no rm -rf"]
        await until(pilot, lambda: any("UserPromptSubmit hook `./check-prompt` ok" in t
                                       for t in texts(app, Notice)))
