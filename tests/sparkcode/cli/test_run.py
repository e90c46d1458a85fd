"""``sparkcode run`` against a scripted server over real HTTP."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from engine.errors import UserError
from engine.paths import Paths
from engine.profiles import AgentKnobs
from sparkcode.cli._run import EXIT_ERROR, EXIT_OK, EXIT_STOPPED, RunRequest, run_headless
from sparkcode.start import SessionOptions
from tests.support.http_server import serve, url
from tests.support.scripted import Reply

WRITE = ("write_file", json.dumps({"path": "notes/todo.txt", "content": "ship it\n"}))


async def run(options: RunRequest) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = await run_headless(options, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


async def test_json_run_writes_a_file_and_records_the_session(workspace: Path) -> None:
    with serve([Reply(tool_calls=[WRITE]), Reply(content=["Done: ", "wrote it."])]) as server:
        code, out, err = await run(
            RunRequest(
                prompt="write a todo",
                workspace=workspace,
                as_json=True,
                endpoint=url(server),
                session=SessionOptions(permission_mode="full-auto"),
            )
        )
    assert code == EXIT_OK, err
    events = [json.loads(line) for line in out.splitlines()]
    types = [e["type"] for e in events]
    assert types[0] == "TurnStarted" and types[-1] == "TurnFinished"
    assert "SnapshotTaken" in types and "ToolCallFinished" in types
    assert events[-1]["content"] == "Done: wrote it." and events[-1]["reason"] == "stop"
    assert (workspace / "notes/todo.txt").read_text() == "ship it\n"
    assert server.requests[0]["model"] == "scripted"  # asked from /v1/models
    sessions = list(Paths.from_env().sessions_dir.rglob("*.jsonl"))
    assert sessions, "the run was not recorded"


async def test_plain_output_streams_the_answer(workspace: Path) -> None:
    with serve([Reply(reasoning=["hmm"], content=["Hello", " world"])]) as server:
        code, out, err = await run(
            RunRequest(
                prompt="hi",
                workspace=workspace,
                endpoint=url(server),
                session=SessionOptions(record=False),
            )
        )
    assert code == EXIT_OK and out == "Hello world\n"
    assert "(thought for 1 tokens)" in err


async def test_non_interactive_run_refuses_edits_without_auto(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    config = Paths.from_env().config_file
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('[agent]\npermission_mode = "ask"\n')
    with serve([Reply(tool_calls=[WRITE]), Reply(content=["ok"])]) as server:
        code, out, err = await run(
            RunRequest(
                prompt="write",
                workspace=workspace,
                endpoint=url(server),
                session=SessionOptions(record=False),
            )
        )
    assert code == EXIT_STOPPED
    assert not (workspace / "notes").exists()
    assert "stopped: denied" in err
    tool_msg = [m for m in server.requests[0]["messages"] if m["role"] == "tool"]
    assert tool_msg == []  # the refusal ended the turn; no second request
    assert len(server.requests) == 1


async def test_the_default_sandbox_mode_edits_and_runs_shell_but_asks_to_commit(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    shell = ("bash", json.dumps({"command": "cat notes/todo.txt > copy.txt"}))
    commit = ("git_commit", json.dumps({"message": "notes"}))
    with serve([Reply(tool_calls=[WRITE, shell, commit]), Reply(content=["ok"])]) as server:
        code, out, err = await run(
            RunRequest(
                prompt="write",
                workspace=repo,
                endpoint=url(server),
                session=SessionOptions(record=False),
            )
        )
    assert code == EXIT_STOPPED and "stopped: denied" in err
    assert (repo / "copy.txt").read_text() == "ship it\n"
    assert len(server.requests) == 1


async def test_max_turns_stops_with_status_3(workspace: Path) -> None:
    read = ("list_files", "{}")
    with serve([Reply(tool_calls=[read]), Reply(tool_calls=[read])]) as server:
        code, _, err = await run(
            RunRequest(
                prompt="look",
                workspace=workspace,
                endpoint=url(server),
                session=SessionOptions(record=False, knobs=AgentKnobs(max_turns=1)),
            )
        )
    assert code == EXIT_STOPPED and "max_turns" in err


async def test_an_answer_swallowed_by_the_server_exits_1_and_says_why(workspace: Path) -> None:
    with serve([Reply(unstreamed=38)]) as server:
        code, out, err = await run(
            RunRequest(
                prompt="write a note",
                workspace=workspace,
                endpoint=url(server),
                session=SessionOptions(record=False),
            )
        )
    assert code == EXIT_ERROR
    assert "generated 38 tokens" in err and out.strip() == ""


async def test_unreachable_endpoint_is_a_user_error(workspace: Path) -> None:
    with pytest.raises(UserError, match="cannot list the models at http://127.0.0.1:9/v1"):
        await run(RunRequest(prompt="x", workspace=workspace, endpoint="http://127.0.0.1:9"))


async def test_missing_workspace_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="is not a directory"):
        await run(
            RunRequest(prompt="x", workspace=tmp_path / "nope", endpoint="http://127.0.0.1:9")
        )


def test_cli_prints_one_error_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from sparkcode.cli import main

    monkeypatch.setattr(
        sys,
        "argv",
        ["sparkcode", "run", "hi", "--endpoint", "http://127.0.0.1:9", "-w", str(tmp_path)],
    )
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == EXIT_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: cannot list the models")


def test_tui_options_before_a_command_are_refused_not_ignored(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `sparkcode --profile X run ...` used to run on the default profile, silently.
    from sparkcode.cli import main

    monkeypatch.setattr(sys, "argv", ["sparkcode", "--profile", "nope", "run", "hi"])
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == EXIT_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--profile before `run` would be ignored" in err[0]


async def test_prompt_file_lines_are_further_turns(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("and now this\n\n  and last  \n")
    with serve(
        [Reply(content=["one"]), Reply(content=["two"]), Reply(content=["three"])]
    ) as server:
        code, out, err = await run(
            RunRequest(
                prompt="first",
                workspace=workspace,
                endpoint=url(server),
                prompt_file=prompts,
                session=SessionOptions(record=False),
            )
        )
    assert code == EXIT_OK, err
    assert out == "one\ntwo\nthree\n"
    users = [[m["content"] for m in r["messages"] if m["role"] == "user"] for r in server.requests]
    assert users == [["first"], ["first", "and now this"], ["first", "and now this", "and last"]]
    # Standard input, line by line; a turn that does not answer stops the run there.
    monkeypatch.setattr(sys, "stdin", io.StringIO("second\nnever sent\n"))
    with serve([Reply(content=["one"]), Reply(content=["cut"], finish="length")]) as server:
        code, out, err = await run(
            RunRequest(
                prompt="first",
                workspace=workspace,
                endpoint=url(server),
                prompt_file=Path("-"),
                session=SessionOptions(record=False),
            )
        )
    assert code == EXIT_STOPPED and len(server.requests) == 2
    with pytest.raises(UserError, match="--prompt-file .*missing.txt: cannot read it"):
        await run(
            RunRequest(
                prompt="x",
                workspace=workspace,
                endpoint="http://127.0.0.1:9",
                prompt_file=tmp_path / "missing.txt",
            )
        )


@pytest.mark.slow  # two fresh interpreters importing sparkcode (about 5 s each)
def test_without_git_sessions_are_refused_by_name_and_the_rest_works(tmp_path: Path) -> None:
    """GitPython used to raise at import on a machine without git, so every command
    died with a traceback (and an editor waited on `sparkcode acp` forever)."""
    import os
    import subprocess

    empty = tmp_path / "bin"  # PATH without git (the interpreter is given by its path)
    empty.mkdir()
    env = {**os.environ, "PATH": str(empty), "SPARKCODE_HOME": str(tmp_path / "home")}

    def sparkcode(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "sparkcode", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    run = sparkcode("run", "hi", "--endpoint", "http://127.0.0.1:9", "-w", str(tmp_path))
    assert run.returncode == EXIT_ERROR
    assert run.stderr.strip().splitlines() == [
        "error: git is not installed (or not on PATH): sparkcode's undo keeps its snapshots "
        "and the git tool works with it; install git (Debian and Ubuntu: apt install git) "
        "and start again"
    ]
    status = sparkcode("engine", "status")
    assert (status.returncode, status.stdout.strip()) == (0, "engine: stopped")
