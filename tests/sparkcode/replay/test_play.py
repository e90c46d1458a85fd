"""``--play``: the recorded bytes re-rendered by the real client and TUI renderer."""

from __future__ import annotations

import asyncio
from pathlib import Path

from textual.widgets import DataTable, Static

from engine.paths import Paths
from sparkcode.agent.core import events as ev
from sparkcode.agent.wire.client import ChatClient
from sparkcode.replay import play_events
from sparkcode.sessions import SessionStore, event_recorder, load_session, start_recording
from sparkcode.tui.screens.replay import ReplayApp, ReplayScreen
from sparkcode.tui.screens.sessions import SessionsScreen
from sparkcode.tui.widgets.chat import AssistantMessage, UserMessage
from sparkcode.tui.widgets.tool_card import ToolCard
from tests.support.sessions import EchoServer


async def _agent_like_session(paths: Paths) -> Path:
    """Two requests with a tool call between them, and the agent's events."""
    server = EchoServer(delay_s=0.01)
    recorder, transport = start_recording(
        "http://scripted.test/v1", workspace=paths.data_dir, inner=server.transport(), paths=paths
    )
    on_event = event_recorder(recorder)
    client = ChatClient("http://scripted.test/v1", "m", transport=transport)
    messages = [{"role": "user", "content": "list the files"}]
    on_event(ev.TurnStarted(turn=1, user_text="list the files"))
    for request in (1, 2):
        async with client.stream_chat(messages) as stream:
            async for _ in stream:
                pass
        if request == 1:
            on_event(
                ev.ToolCallStarted(
                    call_id="c1",
                    name="bash",
                    arguments={"cmd": "ls"},
                    raw_arguments='{"cmd": "ls"}',
                )
            )
            on_event(ev.ToolCallFinished(call_id="c1", name="bash", result="a.txt\nb.txt"))
            messages = [
                *messages,
                {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
                {"role": "user", "content": "thanks bye"},
            ]
    on_event(
        ev.TurnFinished(
            reason="stop",
            content="echo: thanks bye .",
            requests=2,
            prompt_tokens=1,
            completion_tokens=1,
        )
    )
    await client.aclose()
    recorder.close()
    return recorder.path


async def test_play_events_rebuild_the_stream(paths: Paths) -> None:
    session = load_session(await _agent_like_session(paths))
    kinds: list[str] = []
    text = ""
    async for event in play_events(session, speed=0):
        kinds.append(event.event_type)
        if isinstance(event, ev.ContentDelta):
            text += event.text
    assert text == "echo: list the files .echo: thanks bye ."
    assert kinds[0] == "TurnStarted" and kinds[-1] == "TurnFinished"
    assert kinds.count("RequestStarted") == 2
    assert kinds.index("ToolCallStarted") < kinds.index("ToolCallFinished")


async def test_play_keeps_the_recorded_pace_scaled(paths: Paths) -> None:
    session = load_session(await _agent_like_session(paths))
    loop = asyncio.get_running_loop()
    began = loop.time()
    async for _ in play_events(session, speed=1.0):
        pass
    original = loop.time() - began
    began = loop.time()
    async for _ in play_events(session, speed=10.0):
        pass
    fast = loop.time() - began
    # 10 pieces at 10 ms each at least; ten times faster is clearly quicker.
    assert original >= 0.08 and fast < original / 2


async def test_play_renders_in_the_tui(paths: Paths) -> None:
    session = load_session(await _agent_like_session(paths))
    app = ReplayApp(session, speed=0)
    async with app.run_test(size=(100, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, ReplayScreen)
        for _ in range(200):
            if screen.finished:
                break
            await pilot.pause(0.02)
        assert screen.finished and screen.played == 2
        answers = [w.text for w in screen.query(AssistantMessage)]
        assert answers == ["echo: list the files .", "echo: thanks bye ."]
        assert [w.tool for w in screen.query(ToolCard)] == ["bash"]
        assert len(screen.query(UserMessage)) == 1
        title = str(screen.query_one("#replay-title", Static).render())
        assert "request 2/2" in title and "done" in title
        await pilot.press("q")
    assert app.return_code == 0


async def test_sessions_screen_lists_results_and_plays(paths: Paths) -> None:
    path = await _agent_like_session(paths)
    store = SessionStore(paths.sessions_dir)
    store.save_result(
        path.stem,
        {
            "session": path.stem,
            "at": "now",
            "recorded": [
                {"turn": 1, "request": 0, "tokens": 5, "finish": "stop", "detector": None}
            ],
            "runs": [
                {
                    "target": "prefix-on",
                    "turns": [
                        {
                            "turn": 1,
                            "request": 0,
                            "status": "diverged",
                            "flagged": True,
                            "divergence": {
                                "token": 3,
                                "channel": "content",
                                "common": "a",
                                "recorded": "b",
                                "rerun": "c",
                            },
                        }
                    ],
                }
            ],
        },
    )
    session = load_session(path)
    app = ReplayApp(session, speed=0)
    async with app.run_test(size=(120, 40)) as pilot:
        await app.push_screen(SessionsScreen(store))
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, SessionsScreen)
        grid = screen.query_one(DataTable)
        assert grid.row_count == 1
        assert "prefix-on: turns [1] flagged" in str(grid.get_row_at(0)[-1])
        detail = str(screen.query_one("#sessions-result", Static).render())
        assert "≠@3" in detail
        await pilot.press("f")
        await pilot.pause()
        assert isinstance(app.screen, ReplayScreen)


async def test_slash_sessions_in_the_app_lists_and_plays(paths: Paths, tmp_path: Path) -> None:
    """The real app: /sessions opens the browser, f plays, escape comes back."""
    from sparkcode.tui import SparkcodeApp, TuiSettings
    from sparkcode.tui.agent_port import AgentPort, SessionRequest
    from sparkcode.tui.scripted import ScriptedAgent, ScriptedEngine
    from sparkcode.tui.widgets import PromptInput

    path = await _agent_like_session(paths)
    agent = ScriptedAgent([])

    async def factory(request: SessionRequest) -> AgentPort:
        return agent

    settings = TuiSettings(workspace=tmp_path, paths=paths, model="m", poll_s=0.1, idle_poll_s=0.1)
    app = SparkcodeApp(settings, ScriptedEngine(), factory)
    async with app.run_test(size=(110, 36)) as pilot:
        prompt = app.main.query_one(PromptInput)
        prompt.value = "/sessions"
        await pilot.press("enter")
        for _ in range(100):
            if isinstance(app.screen, SessionsScreen):
                break
            await pilot.pause(0.02)
        browser = app.screen
        assert isinstance(browser, SessionsScreen)
        assert browser.query_one(DataTable).get_row_at(0)[0] == path.stem
        await pilot.press("f")
        for _ in range(300):
            if isinstance(app.screen, ReplayScreen) and app.screen.finished:
                break
            await pilot.pause(0.02)
        player = app.screen
        assert isinstance(player, ReplayScreen) and player.finished
        assert [w.text for w in player.query(AssistantMessage)][-1] == "echo: thanks bye ."
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is browser
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen_stack[-1] is app.main
