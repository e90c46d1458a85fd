"""A scripted OpenAI-compatible server over real HTTP for the bench CLI tests.

Chat answers come from ``answer(body) -> text``, streamed as vLLM does (usage
on every frame, a usage-only final frame, ``[DONE]``), or ``-> Reply`` (tool
calls too: :mod:`tests.support.scripted`'s frames). ``/v1/completions``
answers without prompt log-probabilities (a server that has none). With
``hold_after=N`` chat requests after the N-th wait until ``release()``, so a
test can interrupt a run at a known point however loaded the machine is.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.loopback import running
from tests.support.loopback import url as url  # re-exported: the tests import it from here
from tests.support.scripted import Reply, reply_frames

Answer = Callable[[dict[str, Any]], str | Reply]


class _Server(ThreadingHTTPServer):
    answer: Answer
    chats: int
    lock: threading.Lock
    requests: list[dict[str, Any]]
    hold_after: int | None
    released: threading.Event
    daemon_threads = True

    def release(self) -> None:
        self.released.set()


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.endswith("/models"):
            self._json(200, {"object": "list", "data": [{"id": "scripted", "max_model_len": 8192}]})
        else:
            self._json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)
        if self.path.endswith("/tokenize"):
            tokens = list(body["prompt"].encode("utf-8"))
            self._json(200, {"count": len(tokens), "max_model_len": 8192, "tokens": tokens})
            return
        if self.path.endswith("/completions") and "/chat/" not in self.path:
            self._json(
                200,
                {
                    "id": "c",
                    "object": "text_completion",
                    "choices": [{"index": 0, "text": "x", "finish_reason": "length"}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
                },
            )
            return
        if not self.path.endswith("/chat/completions"):
            self._json(404, {"error": {"message": "not found"}})
            return
        with self.server.lock:
            self.server.chats += 1
            nth = self.server.chats
        if self.server.hold_after is not None and nth > self.server.hold_after:
            self.server.released.wait()
        text = self.server.answer(body)
        if isinstance(text, Reply):
            self._reply(text)
            return
        pieces = [text[i : i + 40] for i in range(0, len(text), 40)] or [""]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            for n, piece in enumerate(pieces, start=1):
                self._frame(piece, n, n == len(pieces))
            final = {
                "id": "x",
                "object": "chat.completion.chunk",
                "model": "scripted",
                "choices": [],
                "usage": {
                    "prompt_tokens": 50,
                    "completion_tokens": len(pieces),
                    "total_tokens": 50 + len(pieces),
                },
            }
            self.wfile.write(b"data: " + json.dumps(final).encode() + b"\n\ndata: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # a held request whose client was interrupted meanwhile

    def _reply(self, reply: Reply) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            for frame in reply_frames(reply):
                self.wfile.write(frame)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _frame(self, piece: str, n: int, last: bool) -> None:
        frame = {
            "id": "x",
            "object": "chat.completion.chunk",
            "model": "scripted",
            "choices": [
                {"index": 0, "delta": {"content": piece}, "finish_reason": "stop" if last else None}
            ],
            "usage": {"prompt_tokens": 50, "completion_tokens": n, "total_tokens": 50 + n},
        }
        self.wfile.write(b"data: " + json.dumps(frame).encode() + b"\n\n")

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def serve(answer: Answer, *, hold_after: int | None = None) -> Iterator[_Server]:
    server = _Server(("127.0.0.1", 0), _Handler)
    server.answer = answer
    server.chats = 0
    server.lock = threading.Lock()
    server.requests = []
    server.hold_after = hold_after
    server.released = threading.Event()
    try:
        with running(server):
            yield server
    finally:
        server.release()  # no handler thread is left waiting


def task_of(body: dict[str, Any], problems: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The HumanEval problem whose prompt the request carries."""
    content = body["messages"][-1]["content"]
    return max(
        (p for p in problems.values() if p["prompt"] in content), key=lambda p: len(p["prompt"])
    )
