"""Engine CLI: bad input gives one clear line and a non-zero exit, never a traceback."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engine.paths import Paths
from sparkcode.cli import app

runner = CliRunner()


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        # main() maps UserError to one line; CliRunner bypasses main(), so do it here.
        from engine.errors import UserError

        assert isinstance(result.exception, UserError), result.exception
        return result.exception.exit_code, f"error: {result.exception}"
    return result.exit_code, result.output


def test_profiles_lists_default() -> None:
    code, out = run("engine", "profiles")
    assert code == 0
    assert "* cpu-demo" in out and "glm53-flash-spark" in out and "endpoint" in out


def test_command_prints_exact_argv(paths: Paths) -> None:
    code, out = run("engine", "command", "--profile", "cpu-demo", "--port", "9001")
    assert code == 0
    assert "export VLLM_CPU_KVCACHE_SPACE=1" in out
    joined = " ".join(
        line.rstrip(" \\").strip() for line in out.splitlines() if not line.startswith("export")
    )
    argv = shlex.split(joined)
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--port") + 1] == "9001"
    code, out = run("engine", "command", "--profile", "cpu-demo", "--port", "9001", "--json")
    assert json.loads(out)["argv"][1:] == argv[1:]


@pytest.mark.parametrize("profile", ["cpu-demo", "glm53-flash-2spark"])
def test_command_shows_usage_reporting_and_hub_look_ups_off(paths: Paths, profile: str) -> None:
    code, out = run("engine", "command", "--profile", profile)
    assert code == 0
    nodes = 2 if profile.endswith("2spark") else 1
    for line in (
        "export VLLM_NO_USAGE_STATS=1",
        "export DO_NOT_TRACK=1",
        "export HF_HUB_OFFLINE=1",
        "export TRANSFORMERS_OFFLINE=1",
    ):
        assert out.count(line) == nodes, (line, out)
    code, out = run("engine", "command", "--profile", profile, "--json")
    data = json.loads(out)
    for env in (data["env"], *(node["env"] for node in data["nodes"])):
        assert env["VLLM_NO_USAGE_STATS"] == env["DO_NOT_TRACK"] == "1"
    assert len(data["nodes"]) == nodes - 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("engine", "start", "--profile", "nope"), "unknown profile 'nope'"),
        (("engine", "command", "--profile", "nope"), "unknown profile 'nope'"),
        (("engine", "stop"), "no engine is running"),
        (("engine", "logs"), "no engine log yet"),
    ],
)
def test_bad_input_is_one_line(args: tuple[str, ...], message: str) -> None:
    code, out = run(*args)
    assert code == 1
    assert out.startswith("error: ") and message in out


def test_malformed_user_profile(paths: Paths) -> None:
    paths.profiles_dir.mkdir(parents=True)
    (paths.profiles_dir / "bad.toml").write_text("[profile\n")
    code, out = run("engine", "start", "--profile", "bad")
    assert code == 1 and "bad.toml: malformed TOML" in out


def test_memory_admission_refuses_then_override_reaches_next_check(paths: Paths) -> None:
    code, out = run("engine", "start", "--profile", "glm53-flash-spark", "--port", "18555")
    assert code == 1
    # Either the model is missing (checked first) or the memory is short.
    assert "glm-5.3-flash-sc2" in out


def test_memory_check_names_need_and_override(
    monkeypatch: pytest.MonkeyPatch, paths: Paths, tmp_path: Path
) -> None:
    from engine.supervisor import _checks

    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    paths.profiles_dir.mkdir(parents=True)
    (paths.profiles_dir / "big.toml").write_text(
        f'[profile]\nname = "big"\n[model]\npath = "{model}"\n[memory]\nneed_gib = 100000\n'
    )
    monkeypatch.setattr(_checks, "available_gib", lambda: 12.0)
    code, out = run("engine", "start", "--profile", "big", "--port", "18556")
    assert code == 1
    assert "needs 100000 GiB" in out and "12.0 GiB is available" in out
    assert "--skip-memory-check" in out


def test_main_prints_one_line_without_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from sparkcode.cli import main

    monkeypatch.setattr(sys, "argv", ["sparkcode", "engine", "start", "--profile", "nope"])
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [err.strip()] and "Traceback" not in err


def test_leaving_the_tui_says_the_engine_keeps_running(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from engine.supervisor import EngineStatus, Supervisor
    from sparkcode.cli._tui import note_running_engine

    running = EngineStatus(
        state="ready", pid=4242, profile="cpu-demo", base_url="http://127.0.0.1:8400/v1"
    )
    monkeypatch.setattr(Supervisor, "status", lambda self: running)
    note_running_engine(Paths.from_env())
    err = capsys.readouterr().err
    assert (
        "the cpu-demo engine is still running on http://127.0.0.1:8400/v1 (ready, pid 4242)"
    ) in err
    assert "`sparkcode engine stop` stops it" in err
    monkeypatch.setattr(Supervisor, "status", lambda self: EngineStatus(state="stopped"))
    note_running_engine(Paths.from_env())
    assert capsys.readouterr().err == ""


def test_a_worker_whose_tp_process_died_says_so_despite_exit_code_0() -> None:
    """vLLM's headless node exits 0 after its executor finds a worker process dead (seen
    on real nodes, tests/e2e/test_two_nodes.py): the status row quotes the log line."""
    from engine.supervisor import NodeStatus
    from sparkcode.cli._engine import _node_line

    died = (
        "(MainProcess pid=8807) ERROR 12-02 14:58:24 [multiproc_executor.py:315] Worker "
        "proc VllmWorker-1 died unexpectedly (exit code: -9), shutting down executor."
    )
    node = NodeStatus(
        name="worker",
        state="exited",
        address="127.0.0.1",
        pid=8805,
        exit_code=0,
        log_tail=[
            died,
            "(MainProcess pid=8807) INFO 12-02 "
            "14:58:24 [multiproc_executor.py:486] [shutdown] "
            "Executor: all workers exited gracefully",
        ],
    )
    assert _node_line(node) == (
        "exited, local, 127.0.0.1, pid 8805, exit code 0, ERROR 12-02 14:58:24 "
        "[multiproc_executor.py:315] Worker proc VllmWorker-1 died unexpectedly (exit code: "
        "-9), shutting down executor."
    )
