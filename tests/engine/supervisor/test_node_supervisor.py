"""A two-node engine's lifecycle against stand-in processes (fast, no vLLM).

The head is tests/support/fake_engine.py serving /health; the worker node is the same
script without HTTP (as vLLM's headless worker). Both transports are exercised: local,
and ssh, both through tests/support/ssh_shim.py, which runs ``sparkcode engine node ...``
here with the "other box's" SPARKCODE_HOME, and through a real OpenSSH client and server
on loopback (tests/support/sshd.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from engine.errors import EngineStateError
from engine.paths import Paths
from engine.profiles import LaunchSpec, Profile
from engine.supervisor import (
    EngineStatus,
    LocalNode,
    Reuse,
    SshTransport,
    Supervisor,
    ensure_idle,
    ensure_running,
    node_dir,
)
from tests.support import ROOT
from tests.support.engine import free_port
from tests.support.sshd import running_sshd

SUPPORT = ROOT / "tests" / "support"
FAKE = str(SUPPORT / "fake_engine.py")
REPO = ROOT


@pytest.fixture(autouse=True)
def _no_leftovers(paths: Paths) -> Iterator[None]:
    yield
    with contextlib.suppress(EngineStateError):
        Supervisor(paths).stop(grace=(1, 1))
    with contextlib.suppress(EngineStateError):
        LocalNode(node_dir(paths.engine_dir)).stop(grace=(1, 1))


@pytest.fixture
def model(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "fake"}')
    return model


def _profile() -> Profile:
    return Profile(name="fake2", kind="vllm", description="", source=Path("fake2.toml"))


def _spec(
    model: Path,
    *worker_flags: str,
    ssh: str | None = None,
    worker_model: Path | None = None,
    remote_sparkcode: str = f"{sys.executable} -m sparkcode",
) -> LaunchSpec:
    port = free_port()
    worker = LaunchSpec(
        profile="fake2",
        argv=[sys.executable, FAKE, str(free_port()), "--never-healthy", "--child", *worker_flags],
        env={"VLLM_HOST_IP": "127.0.0.2"},
        base_url="",
        model="fake",
        host="127.0.0.2",
        port=port,
        model_path=worker_model or model,
        node="worker",
        node_rank=1,
        ssh=ssh,
        remote_sparkcode=remote_sparkcode,
    )
    return LaunchSpec(
        profile="fake2",
        argv=[sys.executable, FAKE, str(port), "--child"],
        env={},
        base_url=f"http://127.0.0.1:{port}/v1",
        model="fake",
        port=port,
        model_path=model,
        workers=(worker,),
    )


def _group_gone(pgid: int) -> bool:
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and os.getpgid(proc.pid) == pgid:
                return False
        except (OSError, psutil.Error):
            continue
    return True


def _wait_state(sup: Supervisor, state: str, seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds
    while sup.status().state != state and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sup.status().state == state


def test_start_status_stop_two_local_nodes(paths: Paths, model: Path) -> None:
    sup = Supervisor(paths)
    status = sup.start(_profile(), _spec(model), timeout=30)
    assert status.state == "ready" and status.healthy
    [node] = status.nodes
    assert (node.name, node.state, node.where, node.address) == (
        "worker",
        "running",
        "local",
        "127.0.0.2",
    )
    assert node.pid is not None and node.memory_rss_bytes
    head_pid, worker_pid = status.pid, node.pid
    assert (
        head_pid is not None
        and json.loads(json.dumps(sup.status().to_json()))["nodes"][0]["state"] == "running"
    )
    sup.stop(grace=(3, 3))
    assert sup.status().state == "stopped"
    assert _group_gone(head_pid) and _group_gone(worker_pid)
    assert LocalNode(node_dir(paths.engine_dir)).status().state == "stopped"


def _fake_children(pid: int, seconds: float = 15) -> list[psutil.Process]:
    """The stand-in engines the runner ``pid`` spawned, waited for: "ready" needs the
    head's /health only, and on a loaded box (CI, 2 cores) a worker's runner may not have
    spawned its engine yet."""
    deadline = time.monotonic() + seconds
    while True:
        fakes = [
            proc for proc in psutil.Process(pid).children() if FAKE in " ".join(proc.cmdline())
        ]
        if fakes or time.monotonic() > deadline:
            assert fakes, f"the runner {pid} never spawned {FAKE}"
            return fakes
        time.sleep(0.1)


def _start_and_kill_the_worker(sup: Supervisor, model: Path) -> tuple[EngineStatus, int]:
    """Start the two stand-in nodes, kill the worker's engine while idle, wait until the
    supervisor reports the engine degraded; the start's status and the worker's pid."""
    status = sup.start(_profile(), _spec(model), timeout=30)
    worker_pid = status.nodes[0].pid
    assert worker_pid is not None
    for proc in _fake_children(worker_pid):
        proc.kill()
    _wait_state(sup, "degraded")
    return status, worker_pid


def test_worker_killed_while_idle_makes_the_engine_degraded(paths: Paths, model: Path) -> None:
    sup = Supervisor(paths)
    status, worker_pid = _start_and_kill_the_worker(sup, model)
    degraded = sup.status()
    # The head still answers /health: only the supervisor's own check sees the worker.
    assert degraded.healthy
    [node] = degraded.nodes
    assert node.state == "exited" and node.exit_signal == 9
    assert any(line.startswith("[sparkcode] ") for line in node.log_tail)
    sup.stop(grace=(3, 3))
    assert _group_gone(worker_pid) and status.pid is not None and _group_gone(status.pid)


def test_engine_access_never_reuses_a_degraded_engine(paths: Paths, model: Path) -> None:
    sup = Supervisor(paths)
    status, worker_pid = _start_and_kill_the_worker(sup, model)
    # The head still answers /health, but its next request would fail: not reused...
    for reuse in (Reuse.ANY, Reuse.SAME_PROFILE):
        with pytest.raises(EngineStateError, match="is degraded: its worker node is down"):
            ensure_running(_profile(), paths, reuse=reuse, prepare=False)
    # ...and still an engine in the way of a new one.
    with pytest.raises(EngineStateError, match="already running"):
        ensure_running(_profile(), paths, reuse=Reuse.NEVER, prepare=False)
    with pytest.raises(EngineStateError, match="already running"):
        ensure_idle(paths, "needs the machine")
    assert sup.status().state == "degraded"  # refusing touched nothing


def test_head_crash_leaves_the_worker_for_stop(paths: Paths, model: Path) -> None:
    sup = Supervisor(paths)
    status = sup.start(_profile(), _spec(model), timeout=30)
    assert status.pid is not None
    for proc in _fake_children(status.pid):
        proc.kill()
    _wait_state(sup, "crashed")
    assert sup.status().nodes[0].state == "running"  # vLLM's worker would wait forever
    sup.stop(grace=(3, 3))
    worker_pid = status.nodes[0].pid
    assert worker_pid is not None and _group_gone(worker_pid)
    assert LocalNode(node_dir(paths.engine_dir)).record() is None


def test_a_killed_head_group_is_reported_and_its_worker_stopped(paths: Paths, model: Path) -> None:
    """kill -9 of the head's whole group (its runner too: no exit status is written):
    status says so and names the worker left running; `engine stop` ends it."""
    from typer.testing import CliRunner

    from sparkcode.cli import app

    sup = Supervisor(paths)
    status = sup.start(_profile(), _spec(model), timeout=30)
    head, worker = status.pid, status.nodes[0].pid
    assert head is not None and worker is not None
    os.killpg(head, signal.SIGKILL)
    _wait_state(sup, "crashed")
    crashed = sup.status()
    assert (crashed.exit_code, crashed.exit_signal) == (None, None)
    assert crashed.nodes[0].state == "running" and crashed.nodes[0].pid == worker
    runner = CliRunner()
    text = runner.invoke(app, ["engine", "status"])
    assert text.exit_code == 1
    assert (
        "exit     code unknown: no exit status recorded (the engine's runner was killed "
        "with it, e.g. kill -9 of its process group)" in text.output
    )
    assert "the worker node still runs without its head" in text.output
    stop = runner.invoke(app, ["engine", "stop"])
    assert stop.exit_code == 0, stop.output
    assert stop.output.strip() == (
        "engine had already exited (code unknown: no exit status recorded (the engine's "
        "runner was killed with it, e.g. kill -9 of its process group)); record cleared; "
        f"stopped the worker node it left running (pid {worker})"
    )
    assert _group_gone(head) and _group_gone(worker)
    assert sup.status().state == "stopped"


def test_a_start_after_a_head_crash_stops_the_worker_it_left(paths: Paths, model: Path) -> None:
    """The crashed engine's record names its worker: a new start stops that worker
    first (it would hang the new head) instead of refusing it."""
    sup = Supervisor(paths)
    status = sup.start(_profile(), _spec(model), timeout=30)
    head, worker = status.pid, status.nodes[0].pid
    assert head is not None and worker is not None
    os.killpg(head, signal.SIGKILL)
    _wait_state(sup, "crashed")
    said: list[str] = []
    handle = ensure_running(
        _profile(),
        paths,
        reuse=Reuse.NEVER,
        spec=_spec(model),
        prepare=False,
        timeout=30,
        progress=said.append,
    )
    assert said[0] == "the last engine crashed (exit code unknown); starting a new one"
    assert handle.started and _group_gone(head) and _group_gone(worker)
    [node] = sup.status().nodes
    assert node.state == "running" and node.pid not in (None, worker)


def test_stale_worker_is_refused_before_the_head_starts(paths: Paths, model: Path) -> None:
    stale = LocalNode(node_dir(paths.engine_dir)).start(
        [sys.executable, FAKE, "0", "--never-healthy"],
        {},
        profile="old",
        address="127.0.0.2",
        model_path=str(model),
        redacted_env={},
    )
    sup = Supervisor(paths)
    with pytest.raises(
        EngineStateError,
        match=rf"worker node \(local\) still runs an earlier "
        rf"engine \(pid {stale.pid}\)",
    ):
        sup.start(_profile(), _spec(model), timeout=30)
    assert sup.record() is None
    # `engine stop` clears a worker left without its head.
    stop = subprocess.run(
        [sys.executable, "-m", "sparkcode", "engine", "stop"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert stop.returncode == 0, stop.stderr
    assert f"stopped a worker node left without its head (pid {stale.pid})" in stop.stdout
    assert stale.pid is not None and _group_gone(stale.pid)


def test_worker_with_another_model_is_refused(paths: Paths, model: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text('{"model_type": "fake", "hidden_size": 2}')
    with pytest.raises(EngineStateError, match="worker node's model at .* differs from the head's"):
        Supervisor(paths).start(_profile(), _spec(model, worker_model=other), timeout=30)
    with pytest.raises(EngineStateError, match="worker node .* has no model at"):
        Supervisor(paths).start(_profile(), _spec(model, worker_model=tmp_path / "none"))
    assert Supervisor(paths).record() is None


def test_worker_dying_during_boot_stops_the_head(paths: Paths, model: Path) -> None:
    spec = _spec(model, "--crash-after", "0.1", "--code", "5")
    spec = replace(spec, argv=[*spec.argv, "--never-healthy"])
    sup = Supervisor(paths)
    with pytest.raises(
        EngineStateError,
        match=r"the worker node \(local\) exited during boot "
        r"with code 5: .*simulated engine failure",
    ):
        sup.start(_profile(), spec, timeout=30)
    assert sup.record() is None


@pytest.mark.slow  # about ten `sparkcode engine node` processes, 3-4 s each on 2 loaded cores
def test_ssh_transport_runs_the_node_commands_on_the_other_box(
    paths: Paths, model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other_home = tmp_path / "other-box"
    monkeypatch.setenv("SPARKCODE_SSH", f"{sys.executable} {SUPPORT / 'ssh_shim.py'}")
    monkeypatch.setenv("SPARKCODE_SHIM_HOME", str(other_home))
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    sup = Supervisor(paths)
    status = sup.start(_profile(), _spec(model, ssh="spark2"), timeout=60)
    [node] = status.nodes
    assert (node.state, node.where) == ("running", "ssh spark2")
    # The node's record and log live on the "other box", not here.
    other = LocalNode(other_home / "state" / "engine" / "node")
    record = other.record()
    assert record is not None and record.pid == node.pid
    assert LocalNode(node_dir(paths.engine_dir)).record() is None
    assert any(line.startswith("[sparkcode] ") for line in sup.transports()[0].logs(20))
    sup.stop(grace=(3, 3))
    assert node.pid is not None and _group_gone(node.pid)
    assert other.record() is None


@pytest.mark.slow  # a real sshd and about ten ssh sessions, each a `sparkcode engine node`
def test_the_ssh_transport_through_a_real_openssh(
    paths: Paths, model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same node commands through OpenSSH's own client and server on loopback: the
    remote command is re-split by the login shell in sshd's clean environment (so the
    profile's ``remote_sparkcode`` carries what the other box needs), and ``node start``
    returns although the worker it detached runs on (ssh waits for every holder of the
    session's output)."""
    other_home = tmp_path / "other-box"
    with running_sshd(tmp_path / "sshd") as sshd:
        monkeypatch.setenv("SPARKCODE_SSH", sshd.ssh)
        remote = shlex.join(
            [
                "env",
                f"SPARKCODE_HOME={other_home}",
                f"PYTHONPATH={REPO}",
                sys.executable,
                "-m",
                "sparkcode",
            ]
        )
        spec = _spec(model, ssh=sshd.host, remote_sparkcode=remote)
        sup = Supervisor(paths)
        began = time.monotonic()
        status = sup.start(_profile(), spec, timeout=60)
        assert time.monotonic() - began < 45  # not held until the ssh timeout (60 s)
        [node] = status.nodes
        assert (node.state, node.where) == ("running", f"ssh {sshd.host}")
        other = LocalNode(other_home / "state" / "engine" / "node")
        record = other.record()
        assert record is not None and record.pid == node.pid
        assert LocalNode(node_dir(paths.engine_dir)).record() is None
        # The worker got the launch's environment through the JSON payload, not ssh's.
        assert _fake_children(record.pid)[0].environ()["VLLM_HOST_IP"] == "127.0.0.2"
        assert any(line.startswith("[sparkcode] ") for line in sup.transports()[0].logs(20))
        # A worker killed behind the supervisor's back is seen through ssh too.
        for child in psutil.Process(record.pid).children(recursive=True):
            child.kill()
        _wait_state(sup, "degraded", 30)
        [node] = sup.status().nodes
        assert (node.state, node.where) == ("exited", f"ssh {sshd.host}")
        sup.stop(grace=(3, 3))
        assert node.pid is not None and _group_gone(node.pid)
        assert other.record() is None
    # sshd gone: the node cannot be asked, and its status says why rather than guess.
    lost = SshTransport(sshd.host, remote).status()
    assert lost.state == "unknown" and lost.error is not None
    assert f"ssh {sshd.host}: `" in lost.error and "failed (exit 255)" in lost.error
