"""Ports for the servers tests start, chosen where nothing else will take them.

A port from ``bind(("127.0.0.1", 0))`` is an ephemeral one, the range the kernel also
hands to every engine's internal listeners (vLLM's ``get_open_port`` for its
distributed init) and to other tests' servers in the parallel workers: in a clean-clone
CI run a tiny engine's API port, picked that way, was taken by the time the engine bound
it ("Address already in use", boot failed). These ports come from below the ephemeral
range, from a block of its own for each xdist worker, never the same twice in one run.
"""

from __future__ import annotations

import itertools
import os
import socket
from pathlib import Path

__all__ = ["free_port"]

BLOCK = 1500
"""Ports per worker: a full suite starts a few hundred servers per worker."""
BASE = 20000
"""Where the first worker's block starts (below the usual ephemeral floor, 32768)."""


def _ephemeral_floor() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _worker() -> int:
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    digits = name.removeprefix("gw")
    return int(digits) if digits.isdigit() else 0


_NEXT = itertools.count()


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port free now, outside the ephemeral range where that range leaves room, not
    handed out before in this process (so two calls give two ports)."""
    start = BASE + _worker() * BLOCK
    if start + BLOCK > _ephemeral_floor():  # an unusual range: fall back to the kernel's
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])
    offset = os.getpid() % BLOCK  # two runs on one machine start apart
    for _ in range(BLOCK):
        port = start + (offset + next(_NEXT)) % BLOCK
        if _bindable(port):
            return port
    raise RuntimeError(f"no free port in {start}-{start + BLOCK - 1}")
