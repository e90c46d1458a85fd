"""A loopback HTTP server run on a thread for the duration of a test, and its base URL."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import ThreadingHTTPServer
from typing import TypeVar

S = TypeVar("S", bound=ThreadingHTTPServer)


@contextmanager
def running(server: S) -> Iterator[S]:
    """Serve ``server`` on a daemon thread; shut it down and close it afterwards."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def url(server: ThreadingHTTPServer) -> str:
    """The OpenAI-style base URL (``.../v1``) of a server bound on loopback."""
    host, port = server.server_address[:2]
    return f"http://{host!s}:{port}/v1"
