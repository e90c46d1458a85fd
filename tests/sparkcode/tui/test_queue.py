"""Messages typed while a turn runs, driven with Pilot: queued and sent after the turn,
edited or removed, or steered into the turn after its tool results (prefix kept)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from engine.paths import Paths
from sparkcode.tui import SparkcodeApp
from sparkcode.tui.scripted import answer_script
from sparkcode.tui.widgets import Notice, ToolCard, UserMessage
from sparkcode.tui.widgets.queue import QueuedMessage
from tests.support.scripted import Reply, ScriptedServer

from .conftest import live_app
from .test_pilot import AppFactory, texts, type_line, until


def queued(app: SparkcodeApp) -> list[str]:
    return [str(line.render()) for line in app.main.queue.lines()]


async def test_a_message_typed_during_a_turn_is_queued_then_sent(app_factory: AppFactory) -> None:
    hold = asyncio.Event()
    app, agent, _ = app_factory([answer_script("one", hold=hold), answer_script("two")])
    async with app.run_test(size=(100, 30)) as pilot:
        await type_line(pilot, "first")
        await until(pilot, lambda: app.main.turn_running)
        await type_line(pilot, "and then this")
        await until(pilot, lambda: queued(app) == ["⏳ after turn: and then this"])
        assert app.main.prompt.value == "" and agent.prompts == ["first"]
        assert app.main.queue.display
        hold.set()
        await until(pilot, lambda: agent.turns_run == 2 and not app.main.turn_running)
        assert agent.prompts == ["first", "and then this"]
        assert texts(app, UserMessage) == ["first", "and then this"]
        assert queued(app) == [] and not app.main.queue.display


async def test_queued_messages_are_edited_removed_and_wait_after_a_stop(
    app_factory: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sparkcode.tui.screens.main.STOP_GRACE_S", 0.05)
    hold = asyncio.Event()  # never set: the first turn only ends when stopped
    app, agent, _ = app_factory([answer_script("one", hold=hold), answer_script("two")])
    async with app.run_test(size=(100, 30)) as pilot:
        await type_line(pilot, "first")
        await until(pilot, lambda: app.main.turn_running)
        await type_line(pilot, "keep me")
        await type_line(pilot, "drop me")
        await until(pilot, lambda: len(queued(app)) == 2)
        await pilot.press("shift+tab")  # from the prompt to the last queued line
        line = app.focused
        assert isinstance(line, QueuedMessage) and line.item.text == "drop me"
        await pilot.press("delete")
        await until(pilot, lambda: queued(app) == ["⏳ after turn: keep me"])
        assert app.focused is app.main.prompt
        await pilot.press("shift+tab", "e")
        await until(pilot, lambda: app.main.prompt.value == "keep me" and not queued(app))
        await pilot.press(*" please", "enter")
        await until(pilot, lambda: queued(app) == ["⏳ after turn: keep me please"])
        await pilot.press("escape")  # the user stopped the turn: the queue waits
        await until(pilot, lambda: not app.main.turn_running)
        await until(pilot, lambda: any("1 queued message(s) wait" in t for t in texts(app, Notice)))
        assert agent.turns_run == 1 and queued(app) == ["⏳ after turn: keep me please"]
        await pilot.press("ctrl+s")
        await until(pilot, lambda: agent.turns_run == 2 and not app.main.turn_running)
        assert agent.prompts == ["first", "keep me please"] and not queued(app)


async def test_a_steered_message_joins_the_turn_after_its_tool_results(
    workspace: Path, paths: Paths
) -> None:
    gate = asyncio.Event()
    call = json.dumps({"path": "README.md"})
    server = ScriptedServer(
        [Reply(tool_calls=[("read_file", call)], gate=gate), Reply(content=["It is a demo; hi."])]
    )
    app = live_app(workspace, paths, server)
    async with app.run_test(size=(100, 40)) as pilot:
        await type_line(pilot, "what is in the readme?")
        await until(pilot, lambda: len(server.requests) == 1)
        await pilot.press(*"also say hi")
        await pilot.press("ctrl+s")  # send now: into the running turn
        await until(pilot, lambda: queued(app) == ["⏳ next step: also say hi"])
        gate.set()
        await until(pilot, lambda: not app.main.turn_running and len(server.requests) == 2)
        assert not queued(app)
        # One turn, two requests: the second repeats the first's messages as its prefix,
        # then the reply, its tool result and the steered message.
        first, second = (r["messages"] for r in server.requests)
        assert second[: len(first)] == first
        assert [m["role"] for m in second[len(first) :]] == ["assistant", "tool", "user"]
        assert second[-1] == {"role": "user", "content": "also say hi"}
        # On screen the steered message follows the tool card it came after.
        order = [
            type(w).__name__
            for w in app.main.conversation.children
            if isinstance(w, (UserMessage, ToolCard))
        ]
        assert order == ["UserMessage", "ToolCard", "UserMessage"]
        assert texts(app, UserMessage) == ["what is in the readme?", "also say hi"]


async def test_a_follow_up_typed_as_an_approval_appears_is_queued_and_answers_nothing(
    workspace: Path, paths: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The card that appears while the user types leaves them the focus (their next
    letter, an a here, used to answer it: "always allow"); Enter queues the message,
    moves to the card, and the message is the next turn once the card is answered."""
    monkeypatch.setattr("sparkcode.tui.screens.main.TYPING_GRACE_S", 60.0)  # a loaded CI box
    gate = asyncio.Event()
    write = json.dumps({"path": "notes.txt", "content": "hi\n"})
    server = ScriptedServer(
        [
            Reply(tool_calls=[("write_file", write)], gate=gate),
            Reply(content=["Written."]),
            Reply(content=["All checked."]),
        ]
    )
    app = live_app(workspace, paths, server, permission_mode="ask")
    async with app.run_test(size=(100, 40)) as pilot:
        prompt = app.main.prompt
        await type_line(pilot, "write a note")
        await until(pilot, lambda: len(server.requests) == 1)
        await pilot.press(*"also check ")
        gate.set()  # the model asks to write the file while the user types
        await until(pilot, lambda: app.main.approvals.pending() is not None)
        card = app.main.approvals.pending()
        assert card is not None
        await until(pilot, lambda: any("an approval waits" in t for t in texts(app, Notice)))
        await pilot.press(*"all the logs")
        assert prompt.value == "also check all the logs" and app.focused is prompt
        assert not card.request.future.done()
        await pilot.press("enter")
        await until(pilot, lambda: queued(app) == ["⏳ after turn: also check all the logs"])
        await until(pilot, lambda: app.focused is card)
        assert prompt.value == "" and not card.request.future.done()
        await pilot.press("y")
        await until(
            pilot, lambda: len(server.requests) == 3 and not app.main.turn_running, timeout=10
        )
        assert (workspace / "notes.txt").read_text() == "hi\n"
        assert server.requests[2]["messages"][-1] == {
            "role": "user",
            "content": "also check all the logs",
        }
        assert texts(app, UserMessage) == ["write a note", "also check all the logs"]
        assert not queued(app)
