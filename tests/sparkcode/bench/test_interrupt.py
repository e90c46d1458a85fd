"""Ctrl-C always ends a benchmark run as interrupted, even if a library swallows the cancel."""

from __future__ import annotations

import subprocess
import sys

from tests.support import ROOT
from tests.support.signals import default_sigint

_SCRIPT = """
import asyncio, os, signal, sys, threading
from sparkcode.bench._run import _interruptible

async def swallowing() -> None:
    try:
        await asyncio.sleep(10)
    except asyncio.CancelledError:
        pass  # what a library does when it lets in-flight requests finish

coro = swallowing() if sys.argv[1] == "plain" else _interruptible(swallowing())
threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
try:
    asyncio.run(coro)
except KeyboardInterrupt:
    print("interrupted")
else:
    print("completed")
"""


def _run(mode: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, mode],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ROOT)},
        preexec_fn=default_sigint,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_a_swallowed_cancel_still_ends_interrupted() -> None:
    assert _run("plain") == "completed"  # the failure mode: asyncio.run returns normally
    assert _run("guarded") == "interrupted"
