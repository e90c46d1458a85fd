"""/context and /compact in the app, over the real agent and the scripted server."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Markdown

from engine.paths import Paths
from sparkcode.tui.widgets import ErrorMessage, Notice
from tests.support.scripted import Reply, ScriptedServer

from .conftest import live_app
from .test_pilot import texts, type_line, until


async def test_context_shows_the_parts_and_compact_summarises(
    workspace: Path, paths: Paths
) -> None:
    server = ScriptedServer([Reply(content=["hello"]), Reply(content=["we said hello"])])
    app = live_app(workspace, paths, server)
    async with app.run_test(size=(100, 40)) as pilot:
        await type_line(pilot, "/context")
        await until(
            pilot, lambda: any("no conversation yet" in t for t in texts(app, ErrorMessage))
        )
        await type_line(pilot, "hi")
        await until(pilot, lambda: not app.main.turn_running and len(server.requests) == 1)
        await type_line(pilot, "/context")
        await until(pilot, lambda: bool(app.main.query(Markdown)))
        table = app.main.query(Markdown).last().source
        for part in ("system prompt", "tools", "history", "tool results", "free"):
            assert f"| {part} |" in table
        assert "context window 4,096 tokens" in table  # the server's max_model_len
        await type_line(pilot, "/compact the greeting")
        await until(
            pilot,
            lambda: any("context compacted: 2 older messages" in t for t in texts(app, Notice)),
        )
    asked = server.requests[1]["messages"][-1]["content"]
    assert "Above all, keep: the greeting" in asked
