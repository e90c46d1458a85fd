"""Pre-launch checks: a free port and enough memory."""

from __future__ import annotations

import socket

import psutil

from engine.errors import EngineStateError

GIB = 1024**3


def port_holder(host: str, port: int) -> str | None:
    """A description of whoever listens on ``host:port``, or None if it is free."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            pass
        else:
            return None
    try:
        for conn in psutil.net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
                if conn.pid:
                    try:
                        name = psutil.Process(conn.pid).name()
                    except psutil.Error:
                        name = "?"
                    return f"pid {conn.pid} ({name})"
    except (psutil.AccessDenied, OSError):
        pass
    return "another process"


def ensure_port_free(host: str, port: int) -> None:
    holder = port_holder(host, port)
    if holder is not None:
        raise EngineStateError(
            f"port {port} on {host} is in use by {holder}; pick another with --port"
        )


def available_gib() -> float:
    # On the Spark's unified memory, "available" is what the engine can take.
    return float(psutil.virtual_memory().available) / GIB


def ensure_memory(need_gib: float | None, profile: str, *, override: bool) -> None:
    if need_gib is None or override:
        return
    free = available_gib()
    if free < need_gib:
        raise EngineStateError(
            f"profile {profile} needs {need_gib:.0f} GiB of memory but only {free:.1f} GiB is "
            "available; free memory or pass --skip-memory-check to launch anyway"
        )
