"""The todo panel, /plan -> /act and a resumed session's list, driven with Pilot."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from engine.paths import Paths
from sparkcode.agent.core import events as ev
from sparkcode.agent.core.loop import ACT_PROMPT
from sparkcode.sessions import SessionStore
from sparkcode.start import find_resume
from sparkcode.tui.launch import LaunchOptions, build_app
from sparkcode.tui.scripted import ScriptedAgent
from sparkcode.tui.widgets import AssistantMessage, Notice, TodoPanel
from sparkcode.tui.widgets.todo_panel import render_todos
from tests.sparkcode.start.test_resume_todos import record_plan
from tests.support.http_server import serve, url
from tests.support.scripted import Reply

from .test_pilot import AppFactory, texts, type_line, until


def todo_script(*lists: tuple[tuple[str, ev.TodoStatus], ...]) -> Any:
    async def run(agent: ScriptedAgent, text: str) -> AsyncIterator[ev.Event]:
        yield ev.TurnStarted(turn=agent.turns_run, user_text=text)
        for items in lists:
            yield ev.TodoUpdated(
                items=tuple(
                    ev.TodoItem(id=n, text=t, status=s) for n, (t, s) in enumerate(items, start=1)
                )
            )
        yield ev.ContentDelta(text="plan ready")
        yield ev.TurnFinished(
            reason="stop", content="plan ready", requests=1, prompt_tokens=1, completion_tokens=1
        )

    return run


async def test_plan_shows_the_todo_list_and_act_carries_it_out(app_factory: AppFactory) -> None:
    plan = todo_script((("read the code", "pending"), ("fix it", "pending")))
    act = todo_script((("read the code", "done"), ("fix it", "in_progress")))
    app, agent, _ = app_factory([plan, act])
    async with app.run_test(size=(100, 30)) as pilot:
        panel = app.main.query_one("#todos", TodoPanel)
        assert not panel.display
        await type_line(pilot, "/plan")
        await type_line(pilot, "fix the bug")
        await until(pilot, lambda: agent.turns_run == 1 and not app.main.turn_running)
        assert agent.approval_mode == "plan"
        assert str(app.main.prompt.placeholder).startswith("Plan mode")
        assert panel.display
        assert str(panel.render()) == "todo 0/2\n ○ 1. read the code\n ○ 2. fix it"
        await type_line(pilot, "/act")
        await until(pilot, lambda: agent.turns_run == 2 and not app.main.turn_running)
        assert agent.prompts[-1] == ACT_PROMPT
        assert agent.approval_mode == "ask"  # the mode /plan left
        assert app.main.prompt.placeholder.startswith("Ask, or /help")
        assert str(panel.render()) == "todo 1/2\n ● 1. read the code\n ◐ 2. fix it"
        notices = " ".join(texts(app, Notice))
        assert "approval mode: plan" in notices and "approval mode: ask" in notices
        await type_line(pilot, "/act")
        await until(
            pilot,
            lambda: any(
                "not in plan mode" in t for t in [str(w.render()) for w in app.main.query("*")]
            ),
        )
        await type_line(pilot, "/clear")
        await until(pilot, lambda: not panel.display)


def test_done_items_are_struck_through() -> None:
    text = render_todos((ev.TodoItem(id=1, text="a", status="done"),))
    assert any("strike" in str(span.style) for span in text.spans)


async def test_a_resumed_session_shows_its_list_and_the_model_goes_on(
    tmp_path: Path, paths: Paths
) -> None:
    """The whole path of ``sparkcode --resume ID``: the recorded list is on screen
    before the first prompt, and the real agent (against a scripted server) updates it."""
    ws = tmp_path / "ws"
    ws.mkdir()
    sid = await record_plan(ws, paths)
    rebuilt = await find_resume(SessionStore(paths.sessions_dir), ws, session_id=sid)
    replies = [
        Reply(tool_calls=[("todo", json.dumps({"action": "update", "id": 2, "status": "done"}))]),
        Reply(content=["all done"]),
    ]
    with serve(replies) as server:
        app = build_app(LaunchOptions(workspace=ws, endpoint=url(server), resume=rebuilt), paths)
        async with app.run_test(size=(100, 36)) as pilot:
            panel = app.main.query_one("#todos", TodoPanel)
            await until(pilot, lambda: bool(panel.display))
            assert str(panel.render()) == ("todo 1/2\n ● 1. read the code\n ○ 2. fix the bug")
            await type_line(pilot, "do step 2")
            await until(
                pilot,
                lambda: [w.text for w in app.main.query(AssistantMessage)][-1:] == ["all done"],
                timeout=20,
            )
            assert str(panel.render()) == ("todo 2/2\n ● 1. read the code\n ● 2. fix the bug")
