"""The leader of an unsandboxed background job: runs the command and ends its whole
process group if sparkcode dies without ending it (SIGKILL, a crash, the OOM killer).

Run as a script (``python -I _job_guard.py PARENT_PID -- ARGV...``; stdlib only, so it
starts in ~20 ms without importing sparkcode) in the job's new session, so its process
group is the job's. A sandboxed job needs none: bwrap's ``--die-with-parent`` ends its
PID namespace. Two ways of noticing the parent's death were weighed: ``PR_SET_PDEATHSIG``
fires when the *thread* that forked exits, which an executor thread does at any time;
polling ``getppid()`` every :data:`POLL_S` is exact about the process and costs nothing
measurable. When the parent is gone the group gets SIGTERM, then SIGKILL after
:data:`GRACE_S` (a server that ignores SIGTERM still ends).

While sparkcode lives the guard is transparent: a SIGTERM sent to the group (job_stop)
reaches the command as before; the guard waits for it and exits with its status (a
signal death re-raised), so the job's state reads as the command's own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

POLL_S = 0.2
"""Seconds between checks that sparkcode still lives."""
GRACE_S = 2.0
"""Seconds between SIGTERM and SIGKILL once sparkcode is gone."""


def _end_group() -> None:
    """SIGTERM the group (the guard ignores it), SIGKILL what is left, then go."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.killpg(0, signal.SIGTERM)
    time.sleep(GRACE_S)
    os.killpg(0, signal.SIGKILL)  # the guard too


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: _job_guard.py PARENT_PID -- ARGV...", file=sys.stderr)
        return 2
    parent = int(argv[0])
    if os.getppid() != parent:  # the parent died before the guard ran
        return 125
    # The group's SIGTERM is for the command; the guard waits for it to end.
    signal.signal(signal.SIGTERM, lambda _s, _f: None)
    signal.signal(signal.SIGHUP, lambda _s, _f: None)
    try:
        child = subprocess.Popen(argv[2:], restore_signals=True)
    except OSError as exc:
        print(f"sparkcode: could not start {argv[2]!r}: {exc}", file=sys.stderr)
        return 127
    while True:
        try:
            code = child.wait(timeout=POLL_S)
            break
        except subprocess.TimeoutExpired:
            if os.getppid() != parent:
                _end_group()
    if code < 0:  # died by a signal: die by it too, so the job reads the same
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
