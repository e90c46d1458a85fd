"""The TUI runs the registry's operations (``sparkcode.operations``) on the real agent:
``/effort medium`` reaches the request, and a newly registered entry is a command."""

from __future__ import annotations

from pathlib import Path

from engine.paths import Paths
from sparkcode.operations import Arg, Operation, Ops, Reply, registered
from sparkcode.tui.widgets import ErrorMessage, Notice
from tests.support.scripted import Reply as ModelReply
from tests.support.scripted import ScriptedServer

from .conftest import live_app
from .test_pilot import texts, type_line, until


async def test_effort_medium_reaches_the_request(workspace: Path, paths: Paths) -> None:
    server = ScriptedServer([ModelReply(content=["one"]), ModelReply(content=["two"])])
    app = live_app(workspace, paths, server)
    async with app.run_test(size=(100, 30)) as pilot:
        await type_line(pilot, "/effort medium")  # before the agent: applied when built
        await until(pilot, lambda: "reasoning effort: medium" in texts(app, Notice))
        await type_line(pilot, "hello")
        await until(pilot, lambda: len(server.requests) == 1 and not app.main.turn_running)
        await type_line(pilot, "/effort xhigh")
        await type_line(pilot, "again")
        await until(pilot, lambda: len(server.requests) == 2 and not app.main.turn_running)
    assert [r["reasoning_effort"] for r in server.requests] == ["medium", "xhigh"]


async def _pong(agent: Ops, arg: str) -> Reply:
    return Reply(f"pong {arg}; context has rows: {'|' in agent.context_report()}")


async def test_a_registered_entry_is_a_tui_command_with_palette_and_help(
    workspace: Path, paths: Paths
) -> None:
    ping = Operation(
        "ping",
        "answer pong (a test entry)",
        Arg("[WORD]"),
        query=_pong,
        palette="Ping",
        no_agent="nothing to ping yet",
    )
    server = ScriptedServer([ModelReply(content=["hi"])])
    with registered(ping):
        app = live_app(workspace, paths, server)
        async with app.run_test(size=(100, 30)) as pilot:
            await type_line(pilot, "/ping")  # no agent yet: its own sentence
            await until(
                pilot, lambda: "/ping failed: nothing to ping yet" in texts(app, ErrorMessage)
            )
            await type_line(pilot, "hello")
            await until(pilot, lambda: len(server.requests) == 1 and not app.main.turn_running)
            await type_line(pilot, "/ping there")
            await until(pilot, lambda: "pong there; context has rows: True" in texts(app, Notice))
            titles = [c.title for c in app.get_system_commands(app.main)]
            assert "Ping" in titles
