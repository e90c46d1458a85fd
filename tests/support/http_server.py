"""The scripted server over real HTTP (stdlib, in a thread) for CLI tests."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.loopback import running
from tests.support.loopback import url as url  # re-exported: the tests import it from here
from tests.support.scripted import Reply, reply_frames


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.endswith("/models"):
            self._json(200, {"object": "list", "data": [{"id": "scripted", "max_model_len": 4096}]})
        else:
            self._json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)
        if not self.server.replies:
            self._json(500, {"error": {"message": "script exhausted"}})
            return
        reply = self.server.replies.pop(0)
        if reply.status != 200:
            self._json(reply.status, reply.error_body or {})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.flush()
        time.sleep(reply.silence_s)
        try:
            for chunk in reply_frames(reply):
                self.wfile.write(chunk)
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a silence past its limit)

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _Server(ThreadingHTTPServer):
    replies: list[Reply]
    requests: list[dict[str, Any]]


@contextmanager
def serve(replies: list[Reply]) -> Iterator[_Server]:
    server = _Server(("127.0.0.1", 0), _Handler)
    server.replies = list(replies)
    server.requests = []
    with running(server):
        yield server
