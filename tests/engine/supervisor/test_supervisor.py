"""Supervisor lifecycle against a stand-in engine process (fast, no vLLM)."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from engine.errors import EngineStateError
from engine.paths import Paths
from engine.profiles import LaunchSpec, Profile
from engine.supervisor import Supervisor
from tests.support.engine import FAKE_ENGINE, free_port, stop_leftover_engine

FAKE = FAKE_ENGINE


@pytest.fixture(autouse=True)
def _no_leftover_engine(paths: Paths) -> Iterator[None]:
    yield
    stop_leftover_engine(paths)


def _profile() -> Profile:
    return Profile(name="fake", kind="vllm", description="", source=Path("fake.toml"))


def _spec(port: int, *flags: str) -> LaunchSpec:
    return LaunchSpec(
        profile="fake",
        argv=[sys.executable, FAKE, str(port), *flags],
        env={},
        base_url=f"http://127.0.0.1:{port}/v1",
        model="fake",
        port=port,
    )


def _no_processes_left(pgid: int) -> bool:
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and psutil.os.getpgid(proc.pid) == pgid:
                return False
        except (OSError, psutil.Error):
            continue
    return True


def test_start_status_stop(paths: Paths) -> None:
    sup = Supervisor(paths)
    port = free_port()
    phases: list[str] = []
    status = sup.start(_profile(), _spec(port, "--child"), timeout=30, on_phase=phases.append)
    assert status.state == "ready" and status.healthy
    assert status.port == port and status.profile == "fake" and status.model == "fake"
    assert phases[0] == "starting" and "loading weights" in phases and phases[-1] == "ready"
    # The runner leads a new process group holding the engine and its worker.
    assert status.pid is not None
    assert len(sup._group_pids(sup.record())) >= 3  # type: ignore[arg-type]
    assert sup.status().memory_rss_bytes
    sup.stop(grace=(5, 5))
    assert sup.status().state == "stopped"
    assert _no_processes_left(status.pid)


def test_double_start_is_refused_with_details(paths: Paths) -> None:
    sup = Supervisor(paths)
    port = free_port()
    first = sup.start(_profile(), _spec(port), timeout=30)
    try:
        with pytest.raises(EngineStateError, match=f"already running: pid {first.pid}"):
            sup.start(_profile(), _spec(free_port()), timeout=30)
    finally:
        sup.stop(grace=(5, 5))


def test_busy_port_is_refused(paths: Paths) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(EngineStateError, match=f"port {port} on 127.0.0.1 is in use by pid"):
            Supervisor(paths).start(_profile(), _spec(port), timeout=30)
    assert Supervisor(paths).record() is None


def test_crash_during_boot_reports_code_and_log(paths: Paths) -> None:
    sup = Supervisor(paths)
    with pytest.raises(EngineStateError) as info:
        sup.start(_profile(), _spec(free_port(), "--crash-after", "0.2", "--code", "7"), timeout=30)
    message = str(info.value)
    assert "exited during boot with code 7" in message
    assert "simulated engine failure" in message
    status = sup.status()
    assert status.state == "crashed" and status.exit_code == 7
    assert any("simulated engine failure" in line for line in status.log_tail)
    sup.stop()  # clears the record of the dead engine
    assert sup.status().state == "stopped"


def test_crash_after_boot_is_reported_by_status(paths: Paths) -> None:
    sup = Supervisor(paths)
    status = sup.start(_profile(), _spec(free_port()), timeout=30)
    assert status.state == "ready"
    record = sup.record()
    assert record is not None
    engine = [p for p in psutil.Process(record.pid).children() if FAKE in " ".join(p.cmdline())]
    engine[0].kill()
    deadline = time.monotonic() + 10
    while sup.status().state != "crashed" and time.monotonic() < deadline:
        time.sleep(0.1)
    crashed = sup.status()
    assert crashed.state == "crashed"
    assert crashed.exit_signal == 9


def test_stop_escalates_to_sigkill(paths: Paths) -> None:
    sup = Supervisor(paths)
    status = sup.start(_profile(), _spec(free_port(), "--ignore-int", "--ignore-term"), timeout=30)
    began = time.monotonic()
    sup.stop(grace=(0.5, 0.5))
    assert time.monotonic() - began < 10
    assert status.pid is not None and _no_processes_left(status.pid)


def test_stop_with_nothing_running(paths: Paths) -> None:
    with pytest.raises(EngineStateError, match="no engine is running"):
        Supervisor(paths).stop()


def test_boot_timeout_leaves_engine_running(paths: Paths) -> None:
    sup = Supervisor(paths)
    with pytest.raises(EngineStateError, match="not healthy after 1s"):
        sup.start(_profile(), _spec(free_port(), "--never-healthy"), timeout=1)
    assert sup.status().state == "booting"
    sup.stop(grace=(2, 2))


def test_corrupt_record_is_a_clear_error(paths: Paths) -> None:
    sup = Supervisor(paths)
    sup.dir.mkdir(parents=True)
    sup.record_path.write_text("{not json")
    with pytest.raises(EngineStateError, match="unreadable"):
        sup.status()
