"""One node of a multi-node engine, run on the machine it is on.

The head's supervisor reaches the worker node through a transport
(:mod:`engine.supervisor._transport`): on this machine directly, on another through
``sparkcode engine node start|status|stop|logs|check --json`` over ssh, which runs this
same class there. A node is one process tree under the runner, exactly like the head:
its record ``node.json``, its exit file and one log per start, under
``<state>/engine/node/``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from engine.errors import EngineStateError

from ._checks import available_gib
from ._procs import alive, dir_lock, launch_runner, reap, stop_group, tree_rss
from ._record import EngineRecord, read_exit, read_record, write_record
from ._tail import current_log, tail_lines

NodeState = Literal["stopped", "running", "exited", "unknown"]
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")


@dataclass
class NodeStatus:
    """A node's process tree, as ``engine node status --json`` prints it."""

    name: str
    state: NodeState
    where: str = "local"
    """``local`` or ``ssh HOST``."""
    pid: int | None = None
    address: str | None = None
    uptime_s: float | None = None
    memory_rss_bytes: int | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    log_path: str | None = None
    log_tail: list[str] = field(default_factory=list)
    error: str | None = None
    """Why the node could not be asked (ssh failed); its state is then unknown."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NodeStatus:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class NodeCheck:
    """What the head asks a node before a start."""

    fingerprint: str | None
    """:func:`model_fingerprint` of the model there; None: no model at that path."""
    available_gib: float
    running: NodeStatus

    def to_json(self) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint,
            "available_gib": self.available_gib,
            "running": self.running.to_json(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NodeCheck:
        return cls(
            fingerprint=data.get("fingerprint"),
            available_gib=float(data.get("available_gib", 0.0)),
            running=NodeStatus.from_json(data["running"]),
        )


def model_fingerprint(model_dir: Path) -> str | None:
    """An identity of a model directory that two machines compute alike.

    ``config.json``, the weight files' names and sizes, and each safetensors file's
    header (every tensor's name, dtype, shape and offsets). Not the weights themselves:
    hashing 95 GB would take minutes on each box. mtimes are left out (a copy has its own).
    """
    config = model_dir / "config.json"
    if not config.is_file():
        return None
    digest = hashlib.sha256(config.read_bytes())
    for weight in sorted(model_dir.iterdir()):
        if weight.suffix not in WEIGHT_SUFFIXES:
            continue
        digest.update(f"{weight.name}:{weight.stat().st_size}\n".encode())
        if weight.suffix == ".safetensors":
            with weight.open("rb") as fh:
                head = fh.read(8)
                if len(head) == 8:
                    (size,) = struct.unpack("<Q", head)
                    digest.update(fh.read(min(size, 100 * 2**20)))
    return "sha256:" + digest.hexdigest()[:16]


class LocalNode:
    """The node process tree recorded under ``dir`` on this machine."""

    def __init__(self, dir: Path, name: str = "worker") -> None:
        self.dir = dir
        self.name = name
        self.record_path = dir / "node.json"
        self.exit_path = dir / "exit.json"
        self.logs_dir = dir / "logs"

    def _lock(self) -> contextlib.AbstractContextManager[None]:
        return dir_lock(self.dir, "node.lock")

    def record(self) -> EngineRecord | None:
        return read_record(self.record_path)

    def status(self, tail: int = 20) -> NodeStatus:
        record = self.record()
        if record is None:
            return NodeStatus(name=self.name, state="stopped")
        out = NodeStatus(
            name=self.name,
            state="running",
            pid=record.pid,
            address=record.host,
            log_path=record.log_path,
        )
        if alive(record):
            out.uptime_s = time.time() - record.started_at
            out.memory_rss_bytes = tree_rss(record)
            return out
        reap(record.pid)
        ended = read_exit(self.exit_path) or {}
        out.state = "exited"
        out.exit_code = ended.get("code")
        out.exit_signal = ended.get("signal")
        out.log_tail = tail_lines(Path(record.log_path), tail)
        return out

    def check(self, model_path: str | None) -> NodeCheck:
        fingerprint = model_fingerprint(Path(model_path)) if model_path else None
        return NodeCheck(
            fingerprint=fingerprint, available_gib=available_gib(), running=self.status()
        )

    def start(
        self,
        argv: list[str],
        env: dict[str, str],
        *,
        profile: str,
        address: str,
        model_path: str | None,
        redacted_env: dict[str, str],
    ) -> NodeStatus:
        """Launch the node; refused while an earlier node of this record still runs."""
        with self._lock():
            current = self.record()
            if current is not None and alive(current):
                raise EngineStateError(
                    f"a {self.name} node is already running here: pid {current.pid}, profile "
                    f"{current.profile}, started {time.ctime(current.started_at)}; a head "
                    "cannot join it (vLLM's headless worker outlives its head); stop it "
                    "with `sparkcode engine node stop`"
                )
            stamp = time.strftime("%Y%m%d-%H%M%S")
            log_path = self.logs_dir / f"node-{stamp}-{os.getpid()}.log"
            shown = " ".join(f"{k}={v}" for k, v in sorted(redacted_env.items()))
            pid, created = launch_runner(
                argv, env, self.exit_path, log_path, f"{shown} {' '.join(argv)}"
            )
            record = EngineRecord(
                pid=pid,
                create_time=created,
                port=0,
                host=address,
                profile=profile,
                model=None,
                model_path=model_path,
                base_url="",
                log_path=str(log_path),
                argv=argv,
                env=redacted_env,
                started_at=time.time(),
            )
            write_record(self.record_path, record)
        return self.status()

    def stop(self, grace: tuple[float, float] | None = None) -> NodeStatus:
        """Stop the node's whole group (SIGINT, SIGTERM, SIGKILL); its status before."""
        with self._lock():
            before = self.status()
            record = self.record()
            if record is None:
                return before
            left = stop_group(record, grace)
            if left:
                raise EngineStateError(f"{self.name} node processes survived SIGKILL: {left}")
            self.record_path.unlink(missing_ok=True)
            return before

    def log_path(self) -> Path | None:
        record = self.record()
        return current_log(record.log_path if record else None, self.logs_dir, "node-*.log")

    def logs(self, lines: int) -> list[str]:
        path = self.log_path()
        return tail_lines(path, lines) if path is not None else []


def start_payload(
    argv: list[str],
    env: dict[str, str],
    redacted_env: dict[str, str],
    profile: str,
    address: str,
    model_path: str | None,
) -> str:
    """What ``engine node start --json`` reads on its stdin (argv without the interpreter:
    the node runs it under its own Python)."""
    return json.dumps(
        {
            "argv": argv[1:],
            "env": env,
            "redacted_env": redacted_env,
            "profile": profile,
            "address": address,
            "model_path": model_path,
        }
    )
