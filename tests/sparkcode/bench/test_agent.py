"""``sparkcode bench agent`` against scripted servers over real HTTP: a scripted
"model" that writes each task's reference solution with the real tools succeeds
on every task (of four kinds: about 1 s a try here, so CI runs a sample; every
task's solution is checked in test_agent_tasks.py), one that calls tools badly
fails, side by side; Ctrl-C keeps the finished tries and --resume runs only the rest; bad
input is named."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from sparkcode.bench._agent_tasks import Task, load_tasks
from sparkcode.cli import app
from tests.sparkcode.bench.server import serve, url
from tests.support import ROOT
from tests.support.scripted import Reply
from tests.support.signals import default_sigint

TASKS = load_tasks()


def _task(body: dict[str, Any]) -> Task:
    prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
    return next(t for t in TASKS.values() if t.prompt in prompt)


def solver(body: dict[str, Any]) -> Reply:
    """First request: write the reference files (and remove deleted ones) with the
    agent's real tools; then answer with the reference answer."""
    task = _task(body)
    if body["messages"][-1]["role"] == "tool":
        return Reply(content=[task.solution.answer])
    calls = [
        ("write_file", json.dumps({"path": p, "content": c}))
        for p, c in task.solution.files.items()
    ]
    calls += [("bash", json.dumps({"command": f"rm {p}"})) for p in task.solution.delete]
    return Reply(tool_calls=calls or [("list_files", "{}")])


def clumsy(body: dict[str, Any]) -> Reply:
    """A call to a tool that does not exist and one without its required argument,
    then an answer that echoes the prompt."""
    if body["messages"][-1]["role"] == "tool":
        return Reply(content=["I could not do it."])
    return Reply(tool_calls=[("open_file", '{"path": "a.py"}'), ("read_file", "{}")])


def test_a_solver_passes_every_task_and_a_clumsy_model_none(tmp_path: Path) -> None:
    out = tmp_path / "agent"
    kinds = ("answer", "fix-line", "rename", "run-tests")
    chosen = [t for t in TASKS.values() if t.kind in kinds]
    with serve(solver) as good, serve(clumsy) as bad:
        result = CliRunner().invoke(
            app,
            [
                "bench",
                "agent",
                "--endpoint",
                url(good),
                "--endpoint",
                url(bad),
                "-n",
                "1",
                *(a for k in kinds for a in ("--kind", k)),
                "-o",
                str(out),
            ],
        )
    assert result.exit_code == 0, (result.output, result.exception)
    data = json.loads((out / "results.json").read_text())
    good_label, bad_label = (t["label"] for t in data["targets"])
    good_sum, bad_sum = data["summary"][good_label], data["summary"][bad_label]
    assert good_sum["tries"] == bad_sum["tries"] == len(chosen) == 12
    failed = {k: u["failed"] for k, u in data["units"][good_label].items() if u["failed"]}
    assert failed == {}
    assert good_sum["success"] == 12 and good_sum["malformed_calls"] == 0
    assert bad_sum["success"] == 0 and bad_sum["tasks_solved"] == 0
    assert bad_sum["tool_calls"] == bad_sum["malformed_calls"] == 2 * 12
    unit = data["units"][good_label]["fix-line-add#1"]
    assert unit["tools"] == {"write_file": 1} and unit["requests"] == 2
    assert unit["reason"] == "stop" and unit["completion_tokens"] > 0
    assert "-    return a - b\n+    return a + b" in unit["diff"]
    assert unit["session"] is None  # passed: its recording is not kept
    miss = data["units"][bad_label]["fix-line-add#1"]
    assert miss["failed"] == ["the check program failed: AssertionError"]
    assert miss["session"]  # failed: kept for `sparkcode replay`
    assert data["units"][bad_label]["answer-value#1"]["failed"] == [
        "the answer does not mention 'HI!!'"
    ]
    assert data["settings"]["sandbox"] is True
    table = (out / "table.md").read_text()
    assert "| success / tries | 12 / 12 (100%) | 0 / 12 (0%) |" in table
    assert "| success, rename | 3 / 3 (100%) | 0 / 3 (0%) |" in table
    assert "success, create" not in table
    calls = sum(max(1, len(t.solution.files) + len(t.solution.delete)) for t in chosen)
    assert f"| tool calls (malformed) | {calls} (0) | 24 (24) |" in table
    assert "| rename-module | rename | 1/1 · 3 (0) · 0 · 7 · " in table  # then wall s
    assert (out / "agent.png").stat().st_size > 1000
    again = CliRunner().invoke(app, ["bench", "report", str(out)])
    assert again.exit_code == 0 and "| success / tries | 12 / 12 (100%)" in again.output


def test_ctrl_c_keeps_finished_tries_and_resume_runs_the_rest(tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = ["--kind", "create", "-n", "2"]
    with serve(solver, hold_after=4) as server:  # two tries (two requests each) go through
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sparkcode",
                "bench",
                "agent",
                "--endpoint",
                url(server),
                *args,
                "-o",
                str(out),
            ],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=default_sigint,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and server.chats <= 4:
            time.sleep(0.2)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        time.sleep(1.0)
        server.release()
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert f"--resume {out}" in err
        kept = json.loads((out / "results.json").read_text())
        units = next(iter(kept["units"].values()))
        assert sorted(units) == ["create-hello#1", "create-json#1"]  # try-major order
        assert not kept["complete"] and (out / "table.md").exists()
        sent = len(server.requests)
        result = CliRunner().invoke(app, ["bench", "agent", "--resume", str(out)])
        assert result.exit_code == 0, (result.output, result.exception)
        # Only the 4 unfinished tries were run: two requests each.
        assert len([r for r in server.requests[sent:] if "messages" in r]) == 2 * 4
    final = json.loads((out / "results.json").read_text())
    summary = next(iter(final["summary"].values()))
    assert final["complete"] and summary["success"] == summary["tries"] == 6
    assert [
        u["seed"]
        for k, u in sorted(next(iter(final["units"].values())).items())
        if k.startswith("create-hello")
    ] == [1234, 1235]


def test_jobs_runs_tries_at_the_same_time(tmp_path: Path) -> None:
    """--jobs 3: the three create tries' first requests are in flight together (each
    waits at a barrier of three, which one try at a time would never pass)."""
    meet = threading.Barrier(3, timeout=60)

    def together(body: dict[str, Any]) -> Reply:
        if body["messages"][-1]["role"] == "user":
            meet.wait()
        return solver(body)

    out = tmp_path / "jobs"
    with serve(together) as server:
        result = CliRunner().invoke(
            app,
            [
                "bench",
                "agent",
                "--endpoint",
                url(server),
                "--kind",
                "create",
                "-n",
                "1",
                "--jobs",
                "3",
                "-o",
                str(out),
            ],
        )
    assert result.exit_code == 0, (result.output, result.exception)
    data = json.loads((out / "results.json").read_text())
    summary = next(iter(data["summary"].values()))
    assert summary["success"] == summary["tries"] == 3 and data["settings"]["jobs"] == 3
    assert "3 tries at a time" in (out / "table.md").read_text()


def test_a_try_past_its_timeout_is_stopped_and_checked_as_it_stands(tmp_path: Path) -> None:
    def slow(body: dict[str, Any]) -> Reply:
        if body["messages"][-1]["role"] == "tool":
            time.sleep(3)  # the second request outlives the try
        return solver(body)

    out = tmp_path / "slow"
    with serve(slow) as server:
        result = CliRunner().invoke(
            app,
            [
                "bench",
                "agent",
                "--endpoint",
                url(server),
                "-n",
                "1",
                "--task",
                "create-hello",
                "--task",
                "answer-value",
                "--try-timeout",
                "1.5",
                "-o",
                str(out),
            ],
        )
    assert result.exit_code == 0, (result.output, result.exception)
    units = next(iter(json.loads((out / "results.json").read_text())["units"].values()))
    hello, value = units["create-hello#1"], units["answer-value#1"]
    # The file was written before the timeout: the check passes on what is there.
    assert hello["reason"] == "timeout" and hello["success"] and hello["wall_s"] < 3
    assert value["reason"] == "timeout" and not value["success"]
    assert "turns ended by | timeout 2 |" in (out / "table.md").read_text()


def test_only_a_final_answer_answers(tmp_path: Path) -> None:
    # The right words in a reply that also calls a tool, when the turn stops there
    # (max_turns), are no answer.
    out = tmp_path / "words"
    with serve(
        lambda body: Reply(content=["It is HI!!"], tool_calls=[("list_files", "{}")])
    ) as server:
        result = CliRunner().invoke(
            app,
            [
                "bench",
                "agent",
                "--endpoint",
                url(server),
                "-n",
                "1",
                "--task",
                "answer-value",
                "--max-turns",
                "1",
                "-o",
                str(out),
            ],
        )
    assert result.exit_code == 0, (result.output, result.exception)
    unit = next(iter(json.loads((out / "results.json").read_text())["units"].values()))[
        "answer-value#1"
    ]
    assert unit["reason"] == "max_turns" and unit["answer"] == "It is HI!!"
    assert unit["failed"] == [
        "the answer does not mention 'HI!!'",
        "no final answer: the turn ended by max_turns",
    ]


def test_bad_input_is_named(tmp_path: Path) -> None:
    runner = CliRunner()
    kind = runner.invoke(
        app, ["bench", "agent", "--endpoint", "http://127.0.0.1:9", "--kind", "fix"]
    )
    assert kind.exit_code == 1 and "unknown task kind(s): fix; the kinds are: answer, " in str(
        kind.exception
    )
    dead = runner.invoke(
        app,
        [
            "bench",
            "agent",
            "--endpoint",
            "http://127.0.0.1:9",
            "--task",
            "create-hello",
            "-o",
            str(tmp_path / "dead"),
        ],
    )
    assert "cannot reach http://127.0.0.1:9/v1" in str(dead.exception)
    with serve(lambda body: "hi") as server:
        he = tmp_path / "he"
        runner.invoke(
            app,
            [
                "bench",
                "loops",
                "--endpoint",
                url(server),
                "-n",
                "1",
                "--max-tokens",
                "8",
                "-o",
                str(he),
            ],
        )
    other = runner.invoke(app, ["bench", "agent", "--resume", str(he)])
    assert "holds loops results, not agent" in str(other.exception)
    # A run whose tasks changed since it started is not resumed into one column.
    data = json.loads((tmp_path / "dead" / "results.json").read_text())
    data["settings"]["task_digests"]["create-hello"] = "0" * 64
    (tmp_path / "dead" / "results.json").write_text(json.dumps(data))
    changed = runner.invoke(app, ["bench", "agent", "--resume", str(tmp_path / "dead")])
    assert "cannot be resumed: its tasks changed since it started (changed: create-hello)" in str(
        changed.exception
    )


@pytest.mark.parametrize("extra", [["--tries", "0"], ["--max-turns", "0"], ["--jobs", "0"]])
def test_counts_must_be_positive(extra: list[str]) -> None:
    result = CliRunner().invoke(app, ["bench", "agent", "--endpoint", "http://x:1", *extra])
    assert "must be >= 1" in str(result.exception)


def typo(body: dict[str, Any]) -> Reply:
    """Writes calc.py with a name that does not exist, then answers."""
    if body["messages"][-1]["role"] == "tool":
        return Reply(content=["Done."])
    return Reply(
        tool_calls=[
            (
                "write_file",
                json.dumps({"path": "calc.py", "content": "def add(a, b):\n    return a + bb\n"}),
            )
        ]
    )


@pytest.mark.slow  # the real language server (basedpyright) starts for the first try
def test_no_diagnostics_keeps_the_language_server_out_of_edit_results(tmp_path: Path) -> None:
    """The suite measures what the app does (diagnostics on) unless told otherwise, so
    that the two can be put side by side (docs/agent.md: with and without)."""
    results = {}
    for flag in ("--diagnostics", "--no-diagnostics"):
        out = tmp_path / flag.strip("-")
        with serve(typo) as server:
            result = CliRunner().invoke(
                app,
                [
                    "bench",
                    "agent",
                    "--endpoint",
                    url(server),
                    "-n",
                    "1",
                    "--task",
                    "fix-line-add",
                    flag,
                    "-o",
                    str(out),
                ],
            )
            assert result.exit_code == 0, (result.output, result.exception)
            [tool] = [m for m in server.requests[-1]["messages"] if m["role"] == "tool"]
        results[flag] = tool["content"]
        settings = json.loads((out / "results.json").read_text())["settings"]
        assert settings["diagnostics"] is (flag == "--diagnostics")
        assert (
            "diagnostics in edit results " + ("on" if flag == "--diagnostics" else "off")
            in (out / "table.md").read_text()
        )
    assert "new problem in calc.py after this edit" in results["--diagnostics"]
    assert '"bb" is not defined' in results["--diagnostics"]
    assert "after this edit" not in results["--no-diagnostics"]
    assert results["--no-diagnostics"] == "overwrote calc.py (2 lines)"


def test_until_pass_skips_a_tasks_later_tries_once_one_passed(tmp_path: Path) -> None:
    """--until-pass: create-hello passes on try 1, so tries 2 and 3 are not made; the
    other create tasks fail and get all three; pass@n is what three tries each give."""

    def hello_only(body: dict[str, Any]) -> Reply:
        return solver(body) if _task(body).id == "create-hello" else clumsy(body)

    out = tmp_path / "until"
    with serve(hello_only) as server:
        result = CliRunner().invoke(
            app,
            [
                "bench",
                "agent",
                "--endpoint",
                url(server),
                "--kind",
                "create",
                "-n",
                "3",
                "--until-pass",
                "-o",
                str(out),
            ],
        )
    assert result.exit_code == 0, (result.output, result.exception)
    data = json.loads((out / "results.json").read_text())
    units = next(iter(data["units"].values()))
    assert sorted(units) == [
        "create-hello#1",
        "create-json#1",
        "create-json#2",
        "create-json#3",
        "create-module#1",
        "create-module#2",
        "create-module#3",
    ]
    summary = next(iter(data["summary"].values()))
    assert (summary["tasks_solved"], summary["success"], summary["tries"]) == (1, 1, 7)
    assert data["settings"]["until_pass"] is True
    assert "skipped once one passed (--until-pass" in (out / "table.md").read_text()
