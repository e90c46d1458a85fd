"""Background shell jobs: a server or a watcher the model starts with ``bash``'s
``background``, reads with ``job_output`` and ends with ``job_stop``.

A session has one :class:`JobTable` (the agent's, shared with its ``task``
sub-conversations). Each job runs in its own session and process group, inside
the sandbox when the call runs in it (the same argv as a foreground command),
and its combined output goes to a bounded buffer (the newest :data:`OUTPUT_KEPT`
bytes). Stopping a job sends SIGTERM to its whole group, then SIGKILL after a
grace period; inside the sandbox its PID namespace dies with it (bwrap's
``--die-with-parent``, which also ends it if sparkcode is killed); outside it the
job's leader is :mod:`._job_guard`, which does the same.

Every job ends with the session (:meth:`JobTable.aclose`, from the session's
close), at interpreter exit or on SIGTERM/SIGHUP (:func:`end_all_now`, registered
when the first job starts) and, when sparkcode is killed outright, by the guard or
bwrap, so no process is left behind.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import psutil

OUTPUT_KEPT = 64 * 1024
"""Bytes of a job's output kept in memory (the newest)."""
READ_CAP = 16 * 1024
"""The most bytes one read returns (the newest; what was skipped is said)."""
MAX_RUNNING = 8
"""Jobs that may run at once in one session."""
GRACE_S = 3.0
"""Seconds between SIGTERM and SIGKILL when a job is stopped."""
_GUARD = Path(__file__).with_name("_job_guard.py")
"""The leader of an unsandboxed job, which ends it if sparkcode is killed."""


class JobError(ValueError):
    """A job call that cannot be done; the message says why (the job tools hand it
    to the model as a tool error)."""


class _Tail:
    """The newest ``keep`` bytes of a stream, with absolute offsets."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.data = bytearray()
        self.total = 0
        """Bytes seen since the start."""

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.data += chunk
        if len(self.data) > self.keep:
            del self.data[: len(self.data) - self.keep]

    def since(self, offset: int, cap: int) -> tuple[bytes, int]:
        """The bytes after ``offset`` (at most the newest ``cap``) and how many
        bytes after ``offset`` are skipped (dropped from memory or over the cap)."""
        first_kept = self.total - len(self.data)
        begin = max(offset, first_kept, self.total - cap)
        return bytes(self.data[begin - first_kept :]), begin - offset


@dataclass
class Job:
    """One background command."""

    id: int
    command: str
    sandboxed: bool
    process: asyncio.subprocess.Process
    output: _Tail
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    """When the command's process ended (monotonic)."""
    stopped_by: str | None = None
    """``job_stop`` or ``the session's end`` when ended by sparkcode."""
    read_to: int = 0
    """Output offset the model has seen up to."""
    pump: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process.returncode is None

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def group_alive(self) -> bool:
        """A process of the job's group still runs (the command, or one it left)."""
        return group_alive(self.pid)

    def state(self) -> str:
        """``running for 12s``, ``exited with code 0 after 3.1s``, ``stopped by job_stop``."""
        now = self.ended if self.ended is not None else time.monotonic()
        took = f"{now - self.started:.1f}s"
        code = self.returncode
        if code is None:
            return f"running for {took}"
        if self.stopped_by is not None:
            return f"stopped by {self.stopped_by} after {took} (exit code {code})"
        return f"exited with code {code} after {took}"

    def read_new(self, cap: int = READ_CAP) -> str:
        """The output since the last read (the newest ``cap`` bytes), marked read."""
        data, skipped = self.output.since(self.read_to, cap)
        self.read_to = self.output.total
        text = data.decode("utf-8", "replace")
        if skipped:
            text = f"[... {skipped} earlier bytes not shown ...]\n{text}"
        return text

    def describe(self) -> str:
        """The one-line header of a result: id, state, pid, where, command."""
        where = "in the sandbox" if self.sandboxed else "outside the sandbox"
        line = self.command.splitlines()[0][:100] if self.command else ""
        return f"job {self.id} ({self.state()}; pid {self.pid}, {where}): {line}"


class JobTable:
    """A session's background jobs: starts them, owns their processes, ends them."""

    def __init__(
        self, *, keep: int = OUTPUT_KEPT, grace_s: float = GRACE_S, max_running: int = MAX_RUNNING
    ) -> None:
        self.keep = keep
        self.grace_s = grace_s
        self.max_running = max_running
        self.jobs: dict[int, Job] = {}
        self.offered = True
        """The model is offered the job tools (a profile's ``tools`` may leave them out)."""
        self._next = 1
        self.closed = False

    def running(self) -> list[Job]:
        return [j for j in self.jobs.values() if j.running]

    async def start(self, command: str, argv: Sequence[str], cwd: Path, *, sandboxed: bool) -> Job:
        """Start ``argv`` (``bash -c command``, maybe inside bwrap) as a new job."""
        if self.closed:
            raise JobError("the session is ending; no background job can start")
        running = self.running()
        if len(running) >= self.max_running:
            ids = ", ".join(str(j.id) for j in running)
            raise JobError(
                f"{len(running)} background jobs are running already (jobs "
                f"{ids}); stop one with job_stop first"
            )
        _register(self)
        if not sandboxed:  # bwrap's --die-with-parent covers a sandboxed one
            argv = [sys.executable, "-I", str(_GUARD), str(os.getpid()), "--", *argv]
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        job = Job(self._next, command, sandboxed, process, _Tail(self.keep))
        self._next += 1
        self.jobs[job.id] = job
        job.pump = asyncio.ensure_future(self._pump(job))
        return job

    async def _pump(self, job: Job) -> None:
        """Read the output until every writer closes it; note when the command ends
        (a process it left behind may keep the output open longer)."""
        stdout = job.process.stdout
        assert stdout is not None

        async def read() -> None:
            while chunk := await stdout.read(65536):
                job.output.feed(chunk)

        async def wait() -> None:
            # Not process.wait(): that also waits for the output to close.
            while job.process.returncode is None:
                await asyncio.sleep(0.05)
            job.ended = time.monotonic()

        await asyncio.gather(read(), wait())

    async def settle(self, job: Job, seconds: float) -> None:
        """Wait up to ``seconds`` for the job to end (a command that fails at once)."""
        deadline = time.monotonic() + seconds
        while job.running and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if not job.running and job.pump is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(job.pump), 0.5)

    async def wait_output(self, job: Job, seconds: float) -> None:
        """Wait up to ``seconds`` for output the model has not read, or the job's end."""
        deadline = time.monotonic() + seconds
        while job.running and job.output.total == job.read_to and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if not job.running and job.pump is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(job.pump), 0.5)

    def get(self, job_id: Any) -> Job:
        """The job with ``job_id``; a :class:`JobError` naming the jobs there are."""
        if isinstance(job_id, str) and job_id.strip().isdigit():
            job_id = int(job_id)
        if not isinstance(job_id, int) or isinstance(job_id, bool):
            raise JobError(f"job_id must be a job number, got {job_id!r}")
        job = self.jobs.get(job_id)
        if job is None:
            known = (
                ", ".join(str(j) for j in self.jobs)
                if self.jobs
                else "none (bash with background: true starts one)"
            )
            raise JobError(f"there is no job {job_id}; the jobs are: {known}")
        return job

    async def stop(self, job: Job, by: str = "job_stop") -> None:
        """SIGTERM the job's process group, SIGKILL what is left after the grace
        period, and wait for the process and its output to end."""
        if job.running or group_alive(job.pid):
            if job.running:
                job.stopped_by = by
            _signal_group(job.pid, signal.SIGTERM)
            deadline = time.monotonic() + self.grace_s
            while (job.running or group_alive(job.pid)) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            _signal_group(job.pid, signal.SIGKILL)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(job.process.wait(), 5.0)
        if job.pump is not None and not job.pump.done():
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(job.pump, 2.0)
        if job.ended is None:
            job.ended = time.monotonic()

    async def aclose(self) -> None:
        """End every job (the session is closing); no new one starts."""
        self.closed = True
        await asyncio.gather(*(self.stop(j, "the session's end") for j in self.jobs.values()))
        _LIVE.discard(self)

    def end_now(self) -> None:
        """End every job without an event loop (exit and signal path): SIGTERM, a
        short wait, SIGKILL."""
        self.closed = True
        groups = [j.pid for j in self.jobs.values() if j.running or group_alive(j.pid)]
        for pgid in groups:
            _signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + min(self.grace_s, 1.0)
        while any(group_alive(g) for g in groups) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pgid in groups:
            _signal_group(pgid, signal.SIGKILL)

    def table(self) -> str:
        """The jobs as a Markdown table (``/jobs``)."""
        if not self.jobs and not self.offered:
            return (
                "no background jobs: this profile does not offer them to the model "
                "(its [agent] tools list has no job_output)"
            )
        if not self.jobs:
            return (
                "no background jobs in this session (the model starts one with bash's "
                "background: true)"
            )
        rows = []
        for job in self.jobs.values():
            line = job.command.splitlines()[0][:80] if job.command else ""
            where = "sandbox" if job.sandboxed else "host"
            rows.append(
                f"| {job.id} | {job.state()} | {job.pid} | {where} | "
                f"{job.output.total} | `{line.replace('|', '∣')}` |"
            )
        return (
            "| job | state | pid | where | output bytes | command |\n"
            "|---|---|---|---|---|---|\n" + "\n".join(rows)
        )


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def group_alive(pgid: int) -> bool:
    """A process of group ``pgid`` is alive (zombies, which a container's init may
    never reap, do not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    for proc in psutil.process_iter(["status"]):
        with contextlib.suppress(ProcessLookupError, psutil.Error, OSError):
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                return True
    return False


# -- the exit and signal path ------------------------------------------------------

_LIVE: set[JobTable] = set()
"""Tables with a job started and not closed (held, so an agent dropped unclosed
still has its jobs ended at exit)."""
_HOOKED = False
_PREVIOUS: dict[int, Any] = {}
_EXIT_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def end_all_now() -> None:
    """End every job of every session in this process (atexit and signals)."""
    for table in list(_LIVE):
        table.end_now()


def _register(table: JobTable) -> None:
    global _HOOKED
    _LIVE.add(table)
    if _HOOKED:
        return
    _HOOKED = True
    atexit.register(end_all_now)
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set there; atexit still ends the jobs
    for sig in _EXIT_SIGNALS:
        previous = signal.getsignal(sig)
        if previous is signal.SIG_IGN:
            continue
        _PREVIOUS[sig] = previous
        signal.signal(sig, _on_exit_signal)


def _on_exit_signal(signum: int, frame: FrameType | None) -> None:
    end_all_now()
    previous = _PREVIOUS.get(signum, signal.SIG_DFL)
    if callable(previous):
        previous(signum, frame)
        return
    signal.signal(signum, signal.SIG_DFL)  # die as the signal would have made us
    os.kill(os.getpid(), signum)
