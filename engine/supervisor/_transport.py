"""How the head's supervisor reaches a worker node: on this machine, or over ssh.

Both run the same :class:`engine.supervisor._node.LocalNode` where the node is; ssh
runs ``sparkcode engine node VERB --json`` on the other box and reads one JSON object
back (an ``error`` key: the node refused, and says why). No Ray, no daemon: a node
between commands is its process group, its record and its log.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any, Protocol

from engine.errors import EngineStateError
from engine.profiles import LaunchSpec

from ._node import LocalNode, NodeCheck, NodeStatus, start_payload

SSH_ENV = "SPARKCODE_SSH"
"""Overrides the ssh command (default ``ssh -o BatchMode=yes -o ConnectTimeout=10``);
the tests point it at a stand-in that runs the remote command here."""
SSH_TIMEOUT_S = 60.0


class NodeTransport(Protocol):
    """A worker node, wherever it runs."""

    name: str
    where: str

    def check(self, model_path: str | None) -> NodeCheck: ...
    def start(self, spec: LaunchSpec) -> NodeStatus: ...
    def status(self, tail: int = 20) -> NodeStatus: ...
    def stop(self) -> NodeStatus: ...
    def logs(self, lines: int) -> list[str]: ...


def node_dir(engine_dir: Path) -> Path:
    """Where this machine's node record lives (both transports end up here)."""
    return engine_dir / "node"


class LocalTransport:
    """A node on this machine: a subprocess tree, as in the tests."""

    def __init__(self, engine_dir: Path, name: str = "worker") -> None:
        self.node = LocalNode(node_dir(engine_dir), name)
        self.name = name
        self.where = "local"

    def check(self, model_path: str | None) -> NodeCheck:
        return self.node.check(model_path)

    def start(self, spec: LaunchSpec) -> NodeStatus:
        return self.node.start(
            spec.argv,
            spec.env,
            profile=spec.profile,
            address=spec.host,
            model_path=str(spec.model_path) if spec.model_path else None,
            redacted_env=spec.redacted_env(),
        )

    def status(self, tail: int = 20) -> NodeStatus:
        return self.node.status(tail)

    def stop(self) -> NodeStatus:
        return self.node.stop()

    def logs(self, lines: int) -> list[str]:
        return self.node.logs(lines)


class SshTransport:
    """A node on another machine, driven through ``sparkcode engine node ... --json``."""

    def __init__(self, host: str, sparkcode: str = "sparkcode", name: str = "worker") -> None:
        self.host = host
        self.sparkcode = sparkcode
        self.name = name
        self.where = f"ssh {host}"

    def _run(
        self, verb: str, *args: str, stdin: str | None = None, timeout: float = SSH_TIMEOUT_S
    ) -> dict[str, Any]:
        ssh = shlex.split(os.environ.get(SSH_ENV) or "ssh -o BatchMode=yes -o ConnectTimeout=10")
        remote = shlex.join([*shlex.split(self.sparkcode), "engine", "node", verb, "--json", *args])
        try:
            done = subprocess.run(
                [*ssh, self.host, remote],
                input=stdin,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise EngineStateError(
                f"{self.where}: `{remote}` gave no answer in {timeout:.0f}s"
            ) from None
        except OSError as exc:
            raise EngineStateError(f"cannot run ssh for the {self.name} node: {exc}") from None
        try:
            data = json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else None
        except json.JSONDecodeError:
            data = None
        if not isinstance(data, dict):
            why = (done.stderr.strip() or done.stdout.strip() or "no output")[-500:]
            raise EngineStateError(
                f"{self.where}: `{remote}` failed (exit {done.returncode}): {why}"
            )
        if "error" in data and len(data) == 1:
            raise EngineStateError(f"{self.name} node ({self.where}): {data['error']}")
        return data

    def check(self, model_path: str | None) -> NodeCheck:
        args = ("--model", model_path) if model_path else ()
        return NodeCheck.from_json(self._run("check", *args))

    def start(self, spec: LaunchSpec) -> NodeStatus:
        payload = start_payload(
            spec.argv,
            spec.env,
            spec.redacted_env(),
            spec.profile,
            spec.host,
            str(spec.model_path) if spec.model_path else None,
        )
        return self._status(self._run("start", stdin=payload))

    def status(self, tail: int = 20) -> NodeStatus:
        try:
            return self._status(self._run("status", "--lines", str(tail)))
        except EngineStateError as exc:
            return NodeStatus(name=self.name, state="unknown", where=self.where, error=str(exc))

    def stop(self) -> NodeStatus:
        return self._status(self._run("stop", timeout=SSH_TIMEOUT_S + 40))

    def logs(self, lines: int) -> list[str]:
        data = self._run("logs", "--lines", str(lines))
        return [str(line) for line in data.get("lines", [])]

    def _status(self, data: dict[str, Any]) -> NodeStatus:
        status = NodeStatus.from_json(data)
        status.name, status.where = self.name, self.where
        return status


def transport_for(
    engine_dir: Path, *, ssh: str | None, sparkcode: str = "sparkcode", name: str = "worker"
) -> NodeTransport:
    if ssh is None:
        return LocalTransport(engine_dir, name)
    return SshTransport(ssh, sparkcode, name)
