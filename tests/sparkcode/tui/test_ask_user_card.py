"""``ask_user`` in the app over the real agent and the scripted server: the question is a
card in the conversation with the focus; a typed answer, a picked option and Escape
each reach the model's next request, and the prompt has the focus again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from textual.pilot import Pilot
from textual.widgets import Button, Input

from engine.paths import Paths
from sparkcode.start import SessionOptions, build_session, resolve_target
from sparkcode.tui import SparkcodeApp, TuiSettings
from sparkcode.tui.agent_adapter import LiveAgent
from sparkcode.tui.agent_port import AgentPort, SessionRequest
from sparkcode.tui.asking import user_asker
from sparkcode.tui.launch import LaunchOptions, build_app
from sparkcode.tui.scripted import ScriptedEngine
from sparkcode.tui.widgets.question import QuestionCard
from tests.support.http_server import serve, url
from tests.support.scripted import Reply, ScriptedServer

from .conftest import READY
from .test_pilot import type_line, until


def asking_app(workspace: Path, paths: Paths, server: ScriptedServer) -> SparkcodeApp:
    """The app as ``launch.build_app`` wires it: the agent's asker is the app's card."""
    target = resolve_target(workspace, paths, endpoint="http://engine.test/v1")
    built: list[SparkcodeApp] = []

    async def factory(request: SessionRequest) -> AgentPort:
        session = await build_session(
            target,
            SessionOptions(
                origin="tui",
                start_engine=False,
                transport=server.transport(),
                mcp=False,
                permission_mode="ask",
            ),
            paths,
        )
        session.agent.asker = user_asker(lambda: built[0])
        return LiveAgent(session)

    app = SparkcodeApp(
        TuiSettings(workspace=workspace, paths=paths, model="m"),
        ScriptedEngine(current=READY),
        factory,
    )
    built.append(app)
    return app


def ask(question: str, options: list[str] | None = None) -> Reply:
    args: dict[str, Any] = {"question": question}
    if options:
        args["options"] = options
    return Reply(tool_calls=[("ask_user", json.dumps(args))])


def result(server: ScriptedServer) -> str:
    return str([m for m in server.requests[1]["messages"] if m["role"] == "tool"][0]["content"])


async def card_shown(pilot: Pilot[Any], app: SparkcodeApp) -> QuestionCard:
    await until(pilot, lambda: bool(app.main.query(QuestionCard)))
    card = app.main.query_one(QuestionCard)
    await until(pilot, lambda: app.main.focused is card.query_one(Input))
    return card


async def test_a_typed_answer_goes_to_the_model(workspace: Path, paths: Paths) -> None:
    server = ScriptedServer([ask("Which name should the module get?"), Reply(content=["renamed"])])
    app = asking_app(workspace, paths, server)
    async with app.run_test(size=(120, 40)) as pilot:
        await type_line(pilot, "rename the module")
        card = await card_shown(pilot, app)
        assert "Which name should the module get?" in str(card.query_one(".question-text").render())
        assert not card.query(Button)  # no options: typed only
        await pilot.press("enter")  # an empty answer is refused, the card stays
        await pilot.pause(0.05)
        assert app.main.query(QuestionCard) and len(server.requests) == 1
        await pilot.press(*"textutil", "enter")
        await until(pilot, lambda: not app.main.turn_running and len(server.requests) == 2)
        assert not app.main.query(QuestionCard)
        assert app.main.focused is app.main.prompt
    assert result(server).startswith("the user answered: textutil")


async def test_a_picked_option_and_a_number(workspace: Path, paths: Paths) -> None:
    server = ScriptedServer(
        [
            ask("Which way?", ["keep it", "rename it"]),
            Reply(content=["a"]),
            ask("And the tests?", ["skip", "run them"]),
            Reply(content=["b"]),
        ]
    )
    app = asking_app(workspace, paths, server)
    async with app.run_test(size=(120, 40)) as pilot:
        await type_line(pilot, "tidy up")
        card = await card_shown(pilot, app)
        assert [str(b.label) for b in card.query(Button)] == ["1. keep it", "2. rename it"]
        await pilot.click("#option-2")
        await until(pilot, lambda: not app.main.turn_running and len(server.requests) == 2)
        picked = result(server)
        await type_line(pilot, "and then")
        await card_shown(pilot, app)
        await pilot.press("2", "enter")
        await until(pilot, lambda: not app.main.turn_running and len(server.requests) == 4)
    assert picked.startswith("the user picked option 2: rename it")
    last = [m for m in server.requests[3]["messages"] if m["role"] == "tool"][-1]["content"]
    assert str(last).startswith("the user picked option 2: run them")


async def test_escape_declines_and_the_turn_goes_on(workspace: Path, paths: Paths) -> None:
    server = ScriptedServer([ask("Which way?", ["a", "b"]), Reply(content=["my own way"])])
    app = asking_app(workspace, paths, server)
    async with app.run_test(size=(120, 40)) as pilot:
        await type_line(pilot, "do it")
        await card_shown(pilot, app)
        await pilot.press(*"half typed", "escape")
        await until(pilot, lambda: not app.main.turn_running and len(server.requests) == 2)
        assert not app.main.query(QuestionCard)
    assert result(server).startswith("the user declined to answer; do not ask again")


async def test_stopping_the_turn_removes_the_card(workspace: Path, paths: Paths) -> None:
    server = ScriptedServer([ask("Which way?"), Reply(content=["never sent"])])
    app = asking_app(workspace, paths, server)
    async with app.run_test(size=(120, 40)) as pilot:
        await type_line(pilot, "do it")
        await card_shown(pilot, app)
        app.main.prompt.focus()
        await pilot.press("escape")  # the screen's stop: the card goes with the turn
        await until(pilot, lambda: not app.main.turn_running, timeout=10)
        assert not app.main.query(QuestionCard)
    assert len(server.requests) == 1


async def test_the_launched_app_asks_with_its_card(workspace: Path, paths: Paths) -> None:
    """``sparkcode --endpoint``'s own wiring (``launch.build_app``) gives the agent the
    card: over a real HTTP server, the typed answer is the next request's result."""
    with serve([ask("Which name?"), Reply(content=["renamed"])]) as server:
        app = build_app(LaunchOptions(workspace=workspace, endpoint=url(server)), paths)
        async with app.run_test(size=(120, 40)) as pilot:
            await type_line(pilot, "rename it")
            await card_shown(pilot, app)
            await pilot.press(*"textutil", "enter")
            await until(
                pilot, lambda: not app.main.turn_running and len(server.requests) == 2, timeout=10
            )
        sent = server.requests[1]["messages"][-1]["content"]
    assert str(sent).startswith("the user answered: textutil")
