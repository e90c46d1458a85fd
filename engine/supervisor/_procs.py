"""Process-group plumbing shared by the head's supervisor and a worker node.

Each engine process tree (the head's, or a worker node's) is led by one
``engine.supervisor._runner`` in its own session: its pid is the group id, its exit
file says how the engine ended, and its log holds the engine's output.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil

from ._record import EngineRecord

STOP_GRACE_S: tuple[float, float] = (20.0, 10.0)
"""Seconds to wait after SIGINT, then after SIGTERM, before SIGKILL."""


@contextlib.contextmanager
def dir_lock(dir: Path, name: str) -> Iterator[None]:
    """Holds ``dir/name`` locked (``flock``): one start or stop at a time per state
    directory, across processes (the CLI, the TUI and a test can race)."""
    dir.mkdir(parents=True, exist_ok=True)
    with (dir / name).open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def alive(record: EngineRecord) -> bool:
    """The record's runner still runs (not a later process that reused its pid).

    Its start time is the first test, but not the only one: psutil derives it from the
    boot time, which moves when the clock is stepped (a VM resumed or forked, NTP). On
    2026-12-02 the development VM was forked under a running engine; its runner's
    start time then differed from the record's by more than a second, the engine was
    taken for crashed, and the next ``--profile`` run "cleaned up" the live engine. So a
    process whose command line ends with the record's argv (the runner runs
    ``python -m engine.supervisor._runner EXIT -- ARGV``) is ours whatever the clock says.
    """
    try:
        proc = psutil.Process(record.pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        if abs(proc.create_time() - record.create_time) <= 1.0:
            return True
        argv = list(record.argv)
        return bool(argv) and proc.cmdline()[-len(argv) :] == argv
    except psutil.Error:
        return False


def group_pids(record: EngineRecord) -> list[int]:
    """Every live process of the engine: the runner's group and its tree."""
    pids: set[int] = set()
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == record.pid and proc.status() != psutil.STATUS_ZOMBIE:
                pids.add(proc.pid)
        except (OSError, psutil.Error):
            continue
    with contextlib.suppress(psutil.Error):
        if alive(record):
            root = psutil.Process(record.pid)
            pids.add(root.pid)
            pids.update(c.pid for c in root.children(recursive=True))
    return sorted(pids)


def tree_rss(record: EngineRecord) -> int:
    total = 0
    for pid in group_pids(record):
        with contextlib.suppress(psutil.Error):
            total += psutil.Process(pid).memory_info().rss
    return total


def launch_runner(
    argv: list[str], env: dict[str, str], exit_path: Path, log_path: Path, header: str
) -> tuple[int, float]:
    """Start ``argv`` under the runner, detached in its own session; (pid, create time)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    exit_path.unlink(missing_ok=True)
    full_env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
    with log_path.open("ab") as log:
        log.write(f"[sparkcode] {header}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            [sys.executable, "-m", "engine.supervisor._runner", str(exit_path), "--", *argv],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=full_env,
            start_new_session=True,
            close_fds=True,
        )
    try:
        create_time = psutil.Process(proc.pid).create_time()
    except psutil.Error:
        create_time = time.time()
    return proc.pid, create_time


def stop_group(record: EngineRecord, grace: tuple[float, float] | None = None) -> list[int]:
    """SIGINT, then SIGTERM, then SIGKILL to the record's group; the pids that survived."""
    int_wait, term_wait = grace or STOP_GRACE_S
    for sig, wait_s in (
        (signal.SIGINT, int_wait),
        (signal.SIGTERM, term_wait),
        (signal.SIGKILL, 5.0),
    ):
        pids = group_pids(record)
        if not pids:
            break
        signal_all(record.pid, pids, sig)
        if wait_gone(lambda: group_pids(record), wait_s):
            break
    reap(record.pid)
    return group_pids(record)


def signal_all(pgid: int, pids: list[int], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
    # Processes that left the group (a worker calling setsid) still get it.
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def wait_gone(pids: Callable[[], list[int]], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not pids():
            return True
        time.sleep(0.1)
    return not pids()


def reap(pid: int) -> None:
    """Collect the runner's exit status if this process started it."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
