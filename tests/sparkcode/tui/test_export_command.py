"""/export in the app over the real agent: the recorded session's transcript written,
where it went said, and bad arguments refused by name."""

from __future__ import annotations

import json
from pathlib import Path

from engine.paths import Paths
from sparkcode.tui.exporting import parse_export
from sparkcode.tui.widgets import ErrorMessage, Notice
from tests.support.scripted import Reply, ScriptedServer

from .conftest import live_app
from .test_pilot import texts, type_line, until


def said(app: object, kind: type, part: str) -> bool:
    return any(part in t for t in texts(app, kind))  # type: ignore[arg-type]


async def test_export_writes_the_sessions_transcript(workspace: Path, paths: Paths) -> None:
    shell = json.dumps({"command": "echo '<script>x</script>'"})
    server = ScriptedServer(
        [Reply(reasoning=["hmm"], tool_calls=[("bash", shell)]), Reply(content=["printed it"])]
    )
    app = live_app(workspace, paths, server)
    async with app.run_test(size=(120, 40)) as pilot:
        await type_line(pilot, "/export")
        await until(pilot, lambda: said(app, ErrorMessage, "/export failed: nothing recorded yet"))
        await type_line(pilot, "print a tag")
        await until(pilot, lambda: not app.main.turn_running and len(server.requests) == 2)
        agent = app.main.agent
        assert agent is not None and agent.session_id is not None
        session_id = agent.session_id

        await type_line(pilot, "/export")
        default = paths.sessions_dir / f"{session_id}.md"
        await until(
            pilot,
            lambda: said(
                app, Notice, f"exported the transcript of session {session_id} (md) to {default}"
            ),
        )
        text = default.read_text()
        assert "> print a tag" in text and "### Tool call: `bash`" in text
        assert "<summary>Thinking (1 tokens)</summary>" in text and "printed it" in text

        (workspace / "out").mkdir()
        await type_line(pilot, "/export html out")
        page = workspace / "out" / f"{session_id}.html"
        await until(pilot, lambda: said(app, Notice, f"(html) to {page}"))
        assert "&lt;script&gt;x&lt;/script&gt;" in page.read_text()
        assert "<script>" not in page.read_text()

        await type_line(pilot, "/export html out")
        await until(pilot, lambda: said(app, ErrorMessage, f"{page} exists; give another PATH"))
        await type_line(pilot, "/export pdf")
        await until(pilot, lambda: said(app, ErrorMessage, "unknown format 'pdf' (md or html)"))


def test_parse_export_reads_format_and_path(tmp_path: Path) -> None:
    assert parse_export("", tmp_path) == ("md", None)
    assert parse_export("html", tmp_path) == ("html", None)
    assert parse_export("md notes/t.md", tmp_path) == ("md", tmp_path / "notes" / "t.md")
    assert parse_export("/abs/t.html", tmp_path) == ("html", Path("/abs/t.html"))
    assert parse_export("t.md", tmp_path) == ("md", tmp_path / "t.md")
