"""The engine's parent process: runs the engine and records how it ended.

``sparkcode engine start`` launches ``python -m engine.supervisor._runner
EXIT_FILE -- ARGV...`` as the leader of a new session, so the engine and its
workers share its process group. The runner outlives SIGINT/SIGTERM sent to the
group (the engine handles those itself) and writes the engine's exit status
to EXIT_FILE, which is how a crash after the CLI has returned is reported.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m engine.supervisor._runner EXIT_FILE -- ARGV...", file=sys.stderr)
        return 2
    exit_file, command = argv[0], argv[2:]
    # The whole group receives stop signals; only the engine should act on them.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        child = subprocess.Popen(command, restore_signals=True, preexec_fn=_default_signals)
    except OSError as exc:
        print(f"sparkcode: cannot start engine: {exc}", file=sys.stderr, flush=True)
        _write(exit_file, {"code": 127, "signal": None, "error": str(exc)})
        return 127
    code = child.wait()
    status: dict[str, object] = {
        "code": code if code >= 0 else None,
        "signal": -code if code < 0 else None,
    }
    _write(exit_file, status)
    return code if code >= 0 else 128 - code


def _default_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _write(path: str, status: dict[str, object]) -> None:
    status = {**status, "runner_pid": os.getpid(), "ended_at": time.time()}
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(status, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
