"""``sparkcode --worktree``: the TUI's session works in the worktree, records it, the
sessions screen shows it and the way out says how to merge or remove it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from textual.widgets import DataTable, Static
from typer.testing import CliRunner

from engine.paths import Paths
from sparkcode.cli import app as cli
from sparkcode.sessions import SessionStore
from sparkcode.tui.launch import LaunchOptions, build_app
from sparkcode.tui.screens.sessions import SessionsScreen
from sparkcode.tui.widgets import Notice
from sparkcode.worktree import open_worktree
from tests.support.http_server import serve, url
from tests.support.scripted import Reply

from .test_pilot import texts, type_line, until


async def test_the_launched_app_works_in_the_worktree_and_lists_it(
    repo: Path, paths: Paths
) -> None:
    tree = open_worktree(repo, "tui")
    with serve([Reply(content=["hello from the worktree"])]) as server:
        app = build_app(
            LaunchOptions(workspace=tree.workspace, endpoint=url(server), worktree=tree), paths
        )
        async with app.run_test(size=(140, 40)) as pilot:
            await type_line(pilot, "hi")
            await until(
                pilot, lambda: not app.main.turn_running and bool(server.requests), timeout=10
            )
            await until(
                pilot,
                lambda: any("works in the new worktree" in t for t in texts(app, Notice)),
                timeout=10,
            )
            assert app.main.workspace == tree.path
            await type_line(pilot, "/sessions")
            await until(pilot, lambda: isinstance(app.screen, SessionsScreen))
            grid = app.screen.query_one(DataTable)
            await until(pilot, lambda: grid.row_count == 1)
            assert "sparkcode/tui" in [str(cell) for cell in grid.get_row_at(0)]
            detail = str(app.screen.query_one("#sessions-result", Static).render())
            assert f"worktree {tree.path} (branch sparkcode/tui)" in detail
    [row] = SessionStore(paths.sessions_dir).summaries()
    assert row.worktree == str(tree.path) and row.origin == "tui"


def test_the_command_opens_the_worktree_and_says_how_to_merge_it_on_exit(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    launched: list[LaunchOptions] = []

    class Ran:
        def run(self) -> None:
            (launched[0].workspace / "made.txt").write_text("by the session\n")

    def fake_build_app(options: LaunchOptions, paths: Paths) -> Ran:
        launched.append(options)
        return Ran()

    monkeypatch.setattr("sparkcode.tui.launch.build_app", fake_build_app)
    result = CliRunner().invoke(cli, ["--workspace", str(repo), "--worktree", "feat"])
    assert result.exit_code == 0, result.output
    [options] = launched
    path = (repo / ".git" / "sparkcode" / "worktrees" / "feat").resolve()
    assert options.workspace == path and options.worktree is not None
    assert options.worktree.branch == "sparkcode/feat"
    assert f"git -C {repo} merge sparkcode/feat" in result.stderr
    assert "uncommitted changes" in result.stderr  # made.txt is not committed yet
    assert not (repo / "made.txt").exists()
    head = subprocess.run(
        ["git", "rev-parse", "--abbrev-ref", "HEAD"],
        cwd=path,
        text=True,
        capture_output=True,
        check=True,
    ).stdout.strip()
    assert head == "sparkcode/feat"
