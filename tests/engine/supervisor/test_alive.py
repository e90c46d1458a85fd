"""Whether a record's runner still runs: its start time, or (when the clock was stepped
under it, as when a VM is resumed or forked) its command line ending with the record's
argv; a pid reused by another program is not the engine."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import psutil
import pytest

from engine.supervisor._procs import alive
from engine.supervisor._record import EngineRecord

ARGV = [sys.executable, "-c", "import time; time.sleep(60)", "engine-argv"]


@pytest.fixture
def runner() -> Iterator[subprocess.Popen[bytes]]:
    # As the supervisor's runner: its own command, then "--" and the engine's argv.
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--", *ARGV[1:]])
    yield proc
    proc.kill()
    proc.wait()


def _record(pid: int, create_time: float, argv: list[str]) -> EngineRecord:
    return EngineRecord(
        pid=pid,
        create_time=create_time,
        port=1,
        host="127.0.0.1",
        profile="p",
        model=None,
        model_path=None,
        base_url="",
        log_path="",
        argv=argv,
        env={},
        started_at=0.0,
    )


def test_a_stepped_clock_does_not_make_a_live_engine_dead(runner: subprocess.Popen[bytes]) -> None:
    started = psutil.Process(runner.pid).create_time()
    argv = ARGV[1:]
    assert alive(_record(runner.pid, started, argv))
    # The clock moved 90 s under it: the start times differ, the command line is ours.
    assert alive(_record(runner.pid, started - 90.0, argv))
    # Another program under that pid (its command line is not the record's): not ours.
    assert not alive(_record(runner.pid, started - 90.0, ["vllm", "serve", "other"]))
    assert not alive(_record(runner.pid, started - 90.0, []))
    runner.kill()
    runner.wait()
    assert not alive(_record(runner.pid, started, argv))
