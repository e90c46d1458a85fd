"""``sparkcode run --worktree``: sessions in their own git worktrees, one server for all."""

from __future__ import annotations

import asyncio
import io
import json
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from engine.errors import UserError
from engine.paths import Paths
from sparkcode.cli import app
from sparkcode.cli._run import EXIT_OK, RunRequest, run_headless
from sparkcode.sessions import SessionStore
from sparkcode.start import SessionOptions
from tests.support.http_server import serve, url
from tests.support.loopback import running
from tests.support.scripted import Reply, reply_frames

runner = CliRunner()


def write(path: str, content: str) -> tuple[str, str]:
    return ("write_file", json.dumps({"path": path, "content": content}))


async def run(request: RunRequest) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = await run_headless(request, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def trees(repo: Path) -> Path:
    return (repo / ".git" / "sparkcode" / "worktrees").resolve()


async def test_two_sessions_in_two_worktrees_share_one_server_and_edit_only_their_own(
    repo: Path,
) -> None:
    replies = [
        Reply(tool_calls=[write("a.txt", "from a\n")]),
        Reply(content=["done a"]),
        Reply(tool_calls=[write("b.txt", "from b\n")]),
        Reply(content=["done b"]),
    ]
    with serve(replies) as server:
        results = [
            await run(
                RunRequest(
                    prompt=f"write {name}",
                    workspace=repo,
                    endpoint=url(server),
                    worktree=name,
                    session=SessionOptions(permission_mode="full-auto"),
                )
            )
            for name in ("a", "b")
        ]
    for code, _, err in results:
        assert code == EXIT_OK, err
    a, b = trees(repo) / "a", trees(repo) / "b"
    assert (a / "a.txt").read_text() == "from a\n" and not (a / "b.txt").exists()
    assert (b / "b.txt").read_text() == "from b\n" and not (b / "a.txt").exists()
    assert not (repo / "a.txt").exists() and not (repo / "b.txt").exists()
    assert (
        subprocess.run(
            ["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True, check=True
        ).stdout
        == ""
    )
    assert len(server.requests) == 4  # both sessions talked to the one server
    # On exit: the exact commands naming the branch and the path.
    err_a = results[0][2]
    assert "this session works in the new worktree" in err_a
    assert f"merge it:    git -C {repo} merge sparkcode/a" in err_a
    assert (
        f"git -C {repo} worktree remove --force {a} && git -C {repo} branch -D sparkcode/a" in err_a
    )
    # Each recording says its worktree, and `sessions list` shows it.
    rows = {r.branch: r for r in SessionStore(Paths.from_env().sessions_dir).summaries()}
    assert rows["sparkcode/a"].worktree == str(a) and rows["sparkcode/a"].workspace == str(a)
    assert rows["sparkcode/b"].worktree == str(b)
    listed = runner.invoke(app, ["sessions", "list"])
    assert f"worktree {a} (branch sparkcode/a)" in listed.stdout
    assert f"worktree {b} (branch sparkcode/b)" in listed.stdout
    as_json = json.loads(runner.invoke(app, ["sessions", "list", "--json"]).stdout)
    assert {r["branch"] for r in as_json} == {"sparkcode/a", "sparkcode/b"}
    shown = runner.invoke(app, ["sessions", "show", rows["sparkcode/a"].id])
    assert f"worktree   {a} (branch sparkcode/a)" in shown.stdout


class _ByPrompt(BaseHTTPRequestHandler):
    """A scripted server for sessions at once: the reply follows the request's first user
    message (``write NAME``): a write of NAME.txt, then, after its result, an answer."""

    server: _Routing

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        data = json.dumps({"object": "list", "data": [{"id": "scripted"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        messages = body["messages"]
        name = next(str(m["content"]) for m in messages if m["role"] == "user").split()[-1]
        with self.server.lock:
            self.server.names.append(name)
        if not any(m["role"] == "tool" for m in messages):
            # Each first request waits for the other's: both sessions are in flight at once.
            self.server.barrier.wait()
            reply = Reply(tool_calls=[write(f"{name}.txt", f"from {name}\n")])
        else:
            reply = Reply(content=[f"done {name}"])
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for chunk in reply_frames(reply):
            self.wfile.write(chunk)
            self.wfile.flush()


class _Routing(ThreadingHTTPServer):
    lock: threading.Lock
    names: list[str]
    barrier: threading.Barrier


async def test_two_worktree_sessions_at_once_against_one_server(repo: Path) -> None:
    server = _Routing(("127.0.0.1", 0), _ByPrompt)
    server.lock, server.names = threading.Lock(), []
    server.barrier = threading.Barrier(2, timeout=10)
    with running(server):
        results = await asyncio.gather(
            *(
                run(
                    RunRequest(
                        prompt=f"write {name}",
                        workspace=repo,
                        endpoint=url(server),
                        worktree=name,
                        session=SessionOptions(permission_mode="full-auto", record=False),
                    )
                )
                for name in ("a", "b")
            )
        )
    for code, _, err in results:
        assert code == EXIT_OK, err
    assert [out.strip() for _, out, _ in results] == ["done a", "done b"]
    assert sorted(server.names) == ["a", "a", "b", "b"]
    a, b = trees(repo) / "a", trees(repo) / "b"
    assert sorted(p.name for p in a.iterdir()) == [".git", ".gitignore", "a.txt", "hello.py"]
    assert sorted(p.name for p in b.iterdir()) == [".git", ".gitignore", "b.txt", "hello.py"]
    assert not (repo / "a.txt").exists() and not (repo / "b.txt").exists()


async def test_a_worktree_session_resumes_in_its_worktree_and_a_removed_one_is_named(
    repo: Path,
) -> None:
    look = [("list_files", "{}"), ("grep", json.dumps({"pattern": "^1$"}))]
    with serve(
        [
            Reply(tool_calls=[write("x.txt", "1\n")]),
            Reply(content=["ok"]),
            Reply(tool_calls=look),
            Reply(content=["again"]),
        ]
    ) as server:
        code, _, err = await run(
            RunRequest(
                prompt="one",
                workspace=repo,
                endpoint=url(server),
                worktree="fix",
                session=SessionOptions(permission_mode="full-auto"),
            )
        )
        assert code == EXIT_OK, err
        [first] = SessionStore(Paths.from_env().sessions_dir).summaries()
        # From the main tree, without --worktree: it reopens there.
        code, out, err = await run(
            RunRequest(prompt="two", workspace=repo, endpoint=url(server), resume=first.id)
        )
    assert code == EXIT_OK, err
    assert out.strip() == "again" and "this session works in the worktree" in err
    # The file tools see the worktree's files (the session's first edit).
    listed, found = [
        str(m["content"]) for m in server.requests[-1]["messages"] if m["role"] == "tool"
    ][-2:]
    assert listed.splitlines() == [".gitignore", "hello.py", "x.txt"]  # no `.git` file
    assert found == "x.txt:1: 1"
    assert "merge it:    git -C" in err  # the advice again, for the resumed session
    rows = SessionStore(Paths.from_env().sessions_dir).summaries()
    assert [r.branch for r in rows] == ["sparkcode/fix", "sparkcode/fix"]
    assert rows[1].workspace == str(trees(repo) / "fix")
    shutil.rmtree(trees(repo) / "fix")
    with pytest.raises(
        UserError,
        match=rf"worktree {trees(repo) / 'fix'} \(branch "
        r"sparkcode/fix\), which was removed",
    ):
        await run(
            RunRequest(
                prompt="three", workspace=repo, endpoint="http://127.0.0.1:9", resume=first.id
            )
        )


async def test_bad_worktree_requests_are_clear_and_a_failed_start_leaves_nothing(
    repo: Path, tmp_path: Path
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(UserError, match=f"{plain} is not in the working tree of one"):
        await run(
            RunRequest(prompt="x", workspace=plain, endpoint="http://127.0.0.1:9", worktree="")
        )
    with pytest.raises(UserError, match="git refuses sparkcode/a..b"):
        await run(
            RunRequest(prompt="x", workspace=repo, endpoint="http://127.0.0.1:9", worktree="a..b")
        )
    subprocess.run(["git", "branch", "sparkcode/taken"], cwd=repo, check=True)
    with pytest.raises(UserError, match="branch sparkcode/taken exists"):
        await run(
            RunRequest(prompt="x", workspace=repo, endpoint="http://127.0.0.1:9", worktree="taken")
        )
    # The engine is unreachable: the worktree this start made is removed again.
    with pytest.raises(UserError, match="cannot list the models"):
        await run(
            RunRequest(prompt="x", workspace=repo, endpoint="http://127.0.0.1:9", worktree="new")
        )
    assert not (trees(repo) / "new").exists()
    branches = subprocess.run(
        ["git", "branch", "--list"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout
    assert "sparkcode/new" not in branches


def test_the_command_line_takes_worktree_with_and_without_a_name(repo: Path) -> None:
    with serve([Reply(content=["one"]), Reply(content=["two"])]) as server:
        named = runner.invoke(
            app,
            ["run", "hi", "--endpoint", url(server), "--workspace", str(repo), "--worktree=cli"],
        )
        unnamed = runner.invoke(
            app, ["run", "hi", "--endpoint", url(server), "--workspace", str(repo), "--worktree"]
        )
    assert named.exit_code == 0, named.output
    assert (trees(repo) / "cli").is_dir()
    assert unnamed.exit_code == 0, unnamed.output
    made = sorted(p.name for p in trees(repo).iterdir())
    assert len(made) == 2 and "cli" in made  # the second got a generated name
    # The TUI's option belongs to the TUI: before a command it is refused.
    refused = runner.invoke(app, ["--worktree", "x", "sessions", "list"])
    assert refused.exit_code != 0 and "--worktree" in str(refused.exception)
