"""``sparkcode sessions list/show/export`` and ``replay`` argument errors."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engine.errors import UserError
from engine.paths import Paths
from sparkcode.cli import app, main
from sparkcode.sessions import SessionStore, load_session
from tests.support.engine import free_port
from tests.support.sessions import EchoHTTP, EchoServer, agentish_turns, record_conversation

runner = CliRunner()


async def _two_sessions(paths: Paths) -> list[Path]:
    out = []
    for turns in (agentish_turns("x")[:1], agentish_turns("y")[:3]):
        recorder = await record_conversation(turns, EchoServer().transport(), paths.data_dir)
        out.append(recorder.path)
    return out


def test_list_when_there_is_nothing(paths: Paths) -> None:
    result = runner.invoke(app, ["sessions", "list"])
    assert result.exit_code == 0 and "no sessions recorded yet" in result.stdout
    assert json.loads(runner.invoke(app, ["sessions", "list", "--json"]).stdout) == []


async def test_list_show_export(paths: Paths, tmp_path: Path) -> None:
    first, second = await _two_sessions(paths)
    rows = json.loads(runner.invoke(app, ["sessions", "list", "--json"]).stdout)
    assert {r["id"]: r["requests"] for r in rows} == {first.stem: 1, second.stem: 3}
    assert all(r["engine"] == "http://scripted.test/v1" for r in rows)
    text = runner.invoke(app, ["sessions", "list"]).stdout
    assert first.stem in text and second.stem in text

    shown = runner.invoke(app, ["sessions", "show", second.stem[:6]])
    assert shown.exit_code == 0
    assert shown.stdout.count("request ") == 3 and "echo: PRIME the cache ." in shown.stdout
    data = json.loads(runner.invoke(app, ["sessions", "show", second.stem, "--json"]).stdout)
    assert [r["tokens"] for r in data["requests"]] == [5, 6, 5]  # pieces + end token

    target = tmp_path / "out.jsonl"
    exported = runner.invoke(app, ["sessions", "export", second.stem[:6], str(target)])
    assert exported.exit_code == 0 and target.read_bytes() == second.read_bytes()
    again = runner.invoke(app, ["sessions", "export", second.stem, str(target)])
    assert again.exit_code != 0 and "--force" in str(again.exception)
    # An exported file replays like a stored one.
    assert len(load_session(target).exchanges) == 3


def test_bad_ids_and_arguments_are_clear_errors(paths: Paths) -> None:
    first, _ = asyncio.run(_two_sessions(paths))  # the CLI runs its own event loop
    for args, message in (
        (["sessions", "show", "nosuch"], "no session with ID 'nosuch'"),
        (["replay", "nosuch", "--rerun"], "no session with ID 'nosuch'"),
        (["replay", first.stem], "say what to do"),
        (["replay", first.stem, "--rerun", "--endpoint", "ftp://x"], "--endpoint must"),
        (["replay", first.stem, "--rerun"], "the managed engine is stopped"),
        (
            ["replay", first.stem, "--rerun", "--endpoint", f"http://127.0.0.1:{free_port()}/v1"],
            "cannot reach",
        ),
    ):
        result = runner.invoke(app, args)
        assert isinstance(result.exception, UserError), (args, result.exception)
        assert str(result.exception).startswith(message), (args, str(result.exception))


def test_main_prints_one_error_line(
    paths: Paths, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["sparkcode", "sessions", "show", "nosuch"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("error: no session with ID 'nosuch'")
    assert len(err.strip().splitlines()) == 1


def test_cli_rerun_minimize_writes_a_bundle_and_saves_results(paths: Paths, tmp_path: Path) -> None:
    pytest.importorskip("uvicorn")
    tool_output = "text\n" * 100 + "the needle is here\n" + "tail\n" * 100
    recorder = asyncio.run(
        record_conversation(agentish_turns(tool_output), EchoServer().transport(), paths.data_dir)
    )
    bundle = tmp_path / "bundle"
    with EchoHTTP() as server:
        result = runner.invoke(
            app,
            [
                "replay",
                recorder.path.stem,
                "--rerun",
                "--endpoint",
                server.base_url,
                "--minimize",
                "--bundle",
                str(bundle),
                "--json",
            ],
        )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    turns = data["runs"][0]["turns"]
    assert [t["flagged"] for t in turns] == [False, False, False, True]
    assert turns[3]["rerun_detector"]["pattern"]
    assert data["bundle"] == str(bundle)
    assert sorted(p.name for p in (bundle / "requests").iterdir()) == ["01.json", "02.json"]
    # The sessions screen reads the same results back.
    saved = SessionStore(paths.sessions_dir).load_result(recorder.path.stem)
    assert saved is not None and saved["runs"][0]["target"] == server.base_url
    text = runner.invoke(
        app, ["replay", recorder.path.stem, "--rerun", "--endpoint", "http://127.0.0.1:1/v1"]
    )
    assert isinstance(text.exception, UserError)


def test_resume_and_fork_bad_input_are_clear_errors(
    paths: Paths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, _ = asyncio.run(_two_sessions(paths))
    here = tmp_path / "elsewhere"
    here.mkdir()
    monkeypatch.chdir(here)
    recorded_in = load_session(first).header["workspace"]
    for args, message in (
        (["sessions", "fork", "nosuch"], "no session with ID 'nosuch'"),
        (
            ["sessions", "fork", first.stem, "--turn", "7"],
            f"session {first.stem} has 1 turn; there is no turn 7",
        ),
        (["run", "--resume", "nosuch", "hi"], "no session with ID 'nosuch'"),
        (["run", "--continue", "hi"], f"no recorded session of {here} to continue"),
        (
            ["run", "--resume", first.stem, "hi"],
            f"session {first.stem} was recorded in "
            f"{recorded_in}, not in {here}; to resume it there, pass --workspace",
        ),
        (["run", "--resume", first.stem, "--continue", "hi"], "--resume and --continue"),
        (["run", "--seed", "often", "hi"], "--seed must be"),
    ):
        result = runner.invoke(app, args)
        assert isinstance(result.exception, UserError), (args, result.output, result.exception)
        assert str(result.exception).startswith(message), (args, str(result.exception))


def test_fork_prints_the_new_id(paths: Paths) -> None:
    first, _ = asyncio.run(_two_sessions(paths))
    result = runner.invoke(app, ["sessions", "fork", first.stem, "--turn", "0"])
    assert result.exit_code == 0, result.output
    new_id = result.stdout.strip()
    header = SessionStore(paths.sessions_dir).load(new_id).header
    assert header["parent"] == first.stem and header["parent_turn"] == 0
    assert header["origin"] == "fork"
