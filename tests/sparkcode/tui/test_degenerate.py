"""The degeneration detector watches a live stream once, in the agent, and
``/degenerate`` governs it: the TUI only draws the agent's verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.paths import Paths
from sparkcode.detect import DegenerationDetector
from sparkcode.tui.widgets import Notice
from sparkcode.tui.widgets.chat import DegenerationWarning
from tests.support.scripted import Reply, ScriptedServer

from .conftest import live_app
from .test_pilot import texts, type_line, until

LOOP = ["I will fix it. "] + ["Let me check the file again. "] * 60


async def test_degenerate_off_leaves_no_detector_running(workspace: Path, paths: Paths) -> None:
    server = ScriptedServer([Reply(content=LOOP)])
    app = live_app(workspace, paths, server)
    async with app.run_test(size=(100, 30)) as pilot:
        await type_line(pilot, "/degenerate off")
        await type_line(pilot, "fix it")
        await until(pilot, lambda: bool(server.requests) and not app.main.turn_running)
        assert app.main.renderer.last_content == "".join(LOOP)  # streamed to its end
        assert not app.main.query(DegenerationWarning)


async def test_each_streamed_chunk_is_fed_to_a_detector_once(
    workspace: Path, paths: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    fed: list[str] = []
    feed = DegenerationDetector.feed

    def counting(self: DegenerationDetector, delta: str) -> object:
        fed.append(delta)
        return feed(self, delta)

    monkeypatch.setattr(DegenerationDetector, "feed", counting)
    server = ScriptedServer([Reply(content=LOOP)])
    app = live_app(workspace, paths, server)
    async with app.run_test(size=(100, 30)) as pilot:
        await type_line(pilot, "fix it")
        await until(pilot, lambda: bool(server.requests) and not app.main.turn_running)
        warnings = app.main.query(DegenerationWarning)
        assert len(warnings) == 1 and warnings.first().stopped
        assert any("the stream degenerated" in t for t in texts(app, Notice))
    # The stream stopped where the detector fired: each chunk up to there, once.
    assert fed == LOOP[: len(fed)] and len(fed) < len(LOOP)
