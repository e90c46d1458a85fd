"""``sparkcode sessions export --format md|html``: transcripts, and their bad inputs."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engine.errors import UserError
from engine.paths import Paths
from sparkcode.cli import app
from tests.sparkcode.sessions.test_export import SCRIPT, record

runner = CliRunner()


@pytest.fixture
def recorded(paths: Paths, workspace: Path) -> Path:
    return asyncio.run(record(paths, workspace))


def test_export_writes_markdown_and_html_transcripts(recorded: Path, tmp_path: Path) -> None:
    target = tmp_path / "t.md"
    result = runner.invoke(
        app, ["sessions", "export", recorded.stem[:6], str(target), "--format", "md"]
    )
    assert result.exit_code == 0, result.output
    assert f"exported the transcript of {recorded.stem} (md) to {target}" in result.stdout
    text = target.read_text()
    assert text.startswith(f"# Session {recorded.stem}") and "### Tool call: `write_file`" in text
    # A directory gets ID.html; the page escapes the tool's <script>.
    result = runner.invoke(
        app, ["sessions", "export", recorded.stem, str(tmp_path), "--format", "html"]
    )
    assert result.exit_code == 0, result.output
    page = (tmp_path / f"{recorded.stem}.html").read_text()
    assert "&lt;script&gt;" in page and SCRIPT not in page
    # "-" prints it; the default stays the raw recording.
    printed = runner.invoke(app, ["sessions", "export", recorded.stem, "-", "--format", "md"])
    assert printed.exit_code == 0 and printed.stdout == text
    raw = tmp_path / "raw.jsonl"
    assert runner.invoke(app, ["sessions", "export", recorded.stem, str(raw)]).exit_code == 0
    assert raw.read_bytes() == recorded.read_bytes()


def test_export_refuses_bad_input_by_name(recorded: Path, tmp_path: Path) -> None:
    existing = tmp_path / "t.md"
    existing.write_text("mine")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    cases = [
        (["nosuch", str(tmp_path / "x.md"), "--format", "md"], "no session with ID 'nosuch'"),
        (
            [recorded.stem, str(tmp_path / "x.pdf"), "--format", "pdf"],
            "unknown --format 'pdf'; known: jsonl, md, html",
        ),
        ([recorded.stem, str(existing), "--format", "md"], f"{existing} exists; pass --force"),
        (
            [recorded.stem, str(tmp_path / "no" / "dir" / "x.md"), "--format", "md"],
            f"cannot write {tmp_path / 'no' / 'dir' / 'x.md'}: No such file or directory",
        ),
        (
            [recorded.stem, str(existing / "x.md"), "--format", "md"],  # under a file
            f"cannot write {existing / 'x.md'}: Not a directory",
        ),
    ]
    if os.geteuid() != 0:  # root writes anywhere
        cases.append(
            (
                [recorded.stem, str(locked / "x.html"), "--format", "html"],
                f"cannot write {locked / 'x.html'}: Permission denied",
            )
        )
    try:
        for args, message in cases:
            result = runner.invoke(app, ["sessions", "export", *args])
            assert result.exit_code != 0, args
            assert isinstance(result.exception, UserError), (args, result.exception)
            assert str(result.exception).startswith(message), (args, str(result.exception))
    finally:
        locked.chmod(0o700)
    assert existing.read_text() == "mine"
    forced = runner.invoke(
        app, ["sessions", "export", recorded.stem, str(existing), "--format", "md", "--force"]
    )
    assert forced.exit_code == 0 and existing.read_text().startswith("# Session")
