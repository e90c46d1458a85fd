"""Run untrusted model-written Python: one subprocess per sample, contained.

Layers, outermost first:

- a temporary directory of its own (the working directory and ``HOME``), removed after;
- no network: a fresh network namespace (``unshare -n``, only a down loopback)
  where the OS allows it; :func:`isolation` says which layers are active;
- as root, the sample runs as ``nobody`` (``setpriv``), so the file system is
  read-only to it except world-writable directories;
- rlimits: CPU seconds, address space, file size, process count; and a wall
  timeout that kills the whole process group;
- an audit hook (``sys.addaudithook``, which cannot be removed from Python) that
  refuses writes, renames and deletions outside the directory, sockets, and
  starting programs. Native code (``ctypes``) can get past a hook; the OS layers
  above are what holds then.

Output goes to files capped by the file-size limit (a sample printing forever
cannot fill memory) and the first :data:`OUTPUT_CAP` bytes are kept.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

OUTPUT_CAP = 16_384
NOBODY = 65534

GUARD = r"""
import os as _os, sys as _sys
def _sandbox_guard():
    import resource
    for name, value in %(limits)r:
        resource.setrlimit(getattr(resource, name), (value, value))
    root = _os.path.realpath(_os.getcwd())
    inside = lambda p: (lambda r: r == root or r.startswith(root + _os.sep))(
        _os.path.realpath(_os.fsdecode(p)))
    write_flags = _os.O_WRONLY | _os.O_RDWR | _os.O_CREAT | _os.O_APPEND | _os.O_TRUNC
    path_events = {"os.remove": 1, "os.rmdir": 1, "os.mkdir": 1, "shutil.rmtree": 1,
                   "os.rename": 2, "os.symlink": 2, "os.link": 2, "os.truncate": 1,
                   "os.chmod": 1, "os.chown": 1, "os.utime": 1, "shutil.move": 2,
                   "shutil.copyfile": 2}
    banned = ("socket.", "subprocess.", "os.system", "os.exec", "os.posix_spawn",
              "os.spawn", "os.kill", "os.killpg", "os.fork", "os.forkpty", "pty.",
              "ctypes.dlsym")
    def hook(event, args):
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            if isinstance(path, int) or path is None:
                return
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                (isinstance(flags, int) and flags & write_flags)
            if writing and not inside(path):
                raise PermissionError(f"sandbox: no writing outside the sample directory: "
                                      f"{path}")
        elif event in path_events:
            for p in args[:path_events[event]]:
                if isinstance(p, (str, bytes, _os.PathLike)) and not inside(p):
                    raise PermissionError(f"sandbox: {event} outside the sample directory: "
                                          f"{p}")
        elif event.startswith(banned):
            raise PermissionError(f"sandbox: {event} is not allowed")
    _sys.addaudithook(hook)
_sandbox_guard()
del _sandbox_guard
"""


@dataclass(frozen=True)
class Limits:
    cpu_s: int = 10
    memory_bytes: int = 2 << 30
    file_bytes: int = 16 << 20
    processes: int = 512
    """Per user (``nobody`` is shared by all samples running at once)."""
    wall_s: float = 20.0


@dataclass
class Outcome:
    """How one program run ended."""

    status: str
    """``passed`` (exit 0), ``failed`` (non-zero exit), ``timeout`` (wall or CPU limit)."""
    returncode: int | None
    wall_s: float
    stdout: str
    stderr: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@functools.cache
def isolation() -> dict[str, Any]:
    """Which layers this machine allows (probed once)."""
    out: dict[str, Any] = {
        "audit_hook": True,
        "rlimits": True,
        "netns": False,
        "user": "self",
        "notes": [],
    }
    unshare = shutil.which("unshare")
    if unshare is None:
        out["notes"].append("no unshare binary: samples share the host network")
    else:
        probe = subprocess.run([unshare, "-n", "true"], capture_output=True, text=True, timeout=10)
        if probe.returncode == 0:
            out["netns"] = True
        else:
            reason = probe.stderr.strip()[:200] or f"exit {probe.returncode}"
            out["notes"].append(
                f"unshare -n failed ({reason}): samples share the host "
                "network (the audit hook still refuses sockets)"
            )
    if os.geteuid() == 0:
        if shutil.which("setpriv"):
            out["user"] = "nobody"
        else:
            out["notes"].append("running as root without setpriv: samples run as root")
    return out


def _prelude(limits: Limits) -> str:
    """The guard with the limits filled in: set by the sample's own interpreter before
    its code runs (lowering limits needs no privilege; a ``preexec_fn`` would not be
    safe with the worker threads that run samples in parallel)."""
    values = [
        ("RLIMIT_CPU", limits.cpu_s),
        ("RLIMIT_AS", limits.memory_bytes),
        ("RLIMIT_FSIZE", limits.file_bytes),
        ("RLIMIT_CORE", 0),
        ("RLIMIT_NPROC", limits.processes),
    ]
    return GUARD % {"limits": values}


def _command(script: Path) -> list[str]:
    layers = isolation()
    argv = [sys.executable, "-I", "-B", str(script)]
    if layers["user"] == "nobody":
        argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--", *argv]
    if layers["netns"]:
        argv = ["unshare", "-n", "--", *argv]
    return argv


def _read(path: Path) -> str:
    try:
        with path.open("rb") as fh:
            return fh.read(OUTPUT_CAP).decode("utf-8", "replace")
    except OSError:
        return ""


def run_program(source: str, limits: Limits | None = None) -> Outcome:
    """Run ``source`` as a Python program in a fresh sandbox; its exit status decides."""
    limits = limits or Limits()
    work = Path(tempfile.mkdtemp(prefix="sparkcode-sample-"))
    try:
        sample = work / "sample"
        sample.mkdir()
        script = sample / "program.py"
        script.write_text(_prelude(limits) + "\n" + source, encoding="utf-8")
        if isolation()["user"] == "nobody":
            work.chmod(0o711)  # nobody may enter its own directory, not list the others
            os.chown(sample, NOBODY, NOBODY)
            os.chown(script, NOBODY, NOBODY)
        out_path, err_path = work / "stdout", work / "stderr"
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(sample),
            "TMPDIR": str(sample),
            "LANG": "C.UTF-8",
            "PYTHONHASHSEED": "0",
        }
        began = time.monotonic()
        with out_path.open("wb") as out, err_path.open("wb") as err:
            proc = subprocess.Popen(
                _command(script),
                cwd=sample,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
            try:
                code: int | None = proc.wait(timeout=limits.wall_s)
                timed_out = (
                    code in (-signal.SIGXCPU, -signal.SIGKILL) or code == 128 + signal.SIGXCPU
                )
            except subprocess.TimeoutExpired:
                timed_out, code = True, None
            finally:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                proc.wait()
        wall = time.monotonic() - began
        status = "timeout" if timed_out else "passed" if code == 0 else "failed"
        return Outcome(status, code, round(wall, 3), _read(out_path), _read(err_path))
    finally:
        shutil.rmtree(work, ignore_errors=True)
