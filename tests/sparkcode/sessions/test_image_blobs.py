"""Images in recordings: stored once by sha256 beside the session, put back exactly."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

import httpx

from sparkcode.replay import Target, rerun
from sparkcode.sessions import blobs_dir, load_session
from tests.support.images import image_bytes
from tests.support.sessions import EchoServer, record_conversation


class RawCapture:
    """The server's transport, keeping each request body's exact bytes."""

    def __init__(self, server: EchoServer) -> None:
        self.server = server
        self.bodies: list[bytes] = []

    def transport(self) -> httpx.MockTransport:
        async def handle(request: httpx.Request) -> httpx.Response:
            if request.url.path.endswith("/chat/completions"):
                self.bodies.append(await request.aread())
            return await self.server.handle(request)

        return httpx.MockTransport(handle)


def _conversation(data: bytes, turns: int) -> list[list[dict[str, Any]]]:
    """``turns`` requests of one conversation whose first message carries the image."""
    url = "data:image/png;base64," + base64.b64encode(data).decode()
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "you are a test"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": url}},
            ],
        },
        {"role": "assistant", "content": "a red square"},
    ]
    out = []
    for n in range(turns):
        messages = [*messages, {"role": "user", "content": f"question {n}"}]
        out.append(messages)
        messages = [*messages, {"role": "assistant", "content": f"answer {n}"}]
    return out


async def test_ten_requests_store_the_image_once_and_load_back_byte_exact(tmp_path: Path) -> None:
    data = image_bytes("PNG", (300, 200)) + b""  # ~1 KiB of PNG
    other = image_bytes("JPEG", (40, 40))
    capture = RawCapture(EchoServer())
    turns = _conversation(data, 10)
    # The last request also carries a second image: two blobs, each once.
    other_url = "data:image/jpeg;base64," + base64.b64encode(other).decode()
    turns[-1] = [
        *turns[-1][:-1],
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "and this?"},
                {"type": "image_url", "image_url": {"url": other_url}},
            ],
        },
    ]
    recorder = await record_conversation(turns, capture.transport(), tmp_path)

    stored = sorted(p.name for p in blobs_dir(recorder.path).iterdir())
    assert stored == sorted([hashlib.sha256(data).hexdigest(), hashlib.sha256(other).hexdigest()])
    assert (blobs_dir(recorder.path) / hashlib.sha256(data).hexdigest()).read_bytes() == data
    text = recorder.path.read_text(encoding="utf-8")
    assert base64.b64encode(data).decode() not in text  # not once, let alone 10 times
    assert text.count('"blobs":') == 10

    session = load_session(recorder.path)
    assert not session.problems
    assert [e.body for e in session.exchanges] == capture.bodies  # byte for byte

    # Replay: the rerun sends exactly the recorded bytes again, images included.
    resent = RawCapture(EchoServer())
    result = await rerun(
        session,
        Target(label="t", base_url="http://scripted.test/v1"),
        transport=resent.transport(),
        isolate=False,
    )
    assert resent.bodies == capture.bodies
    assert [t.status for t in result.turns] == ["identical"] * 10


async def test_a_missing_image_file_is_a_named_problem_not_a_lost_session(tmp_path: Path) -> None:
    data = image_bytes("PNG")
    recorder = await record_conversation(_conversation(data, 2), EchoServer().transport(), tmp_path)
    (blobs_dir(recorder.path) / hashlib.sha256(data).hexdigest()).unlink()
    session = load_session(recorder.path)
    assert len(session.exchanges) == 2 and all(e.complete for e in session.exchanges)
    digest = hashlib.sha256(data).hexdigest()[:12]
    assert [p.message.split(" is missing")[0] for p in session.problems] == [
        f"request 0: image {digest} of this request",
        f"request 1: image {digest} of this request",
    ]


async def test_export_takes_the_images_along(tmp_path: Path) -> None:
    from sparkcode.cli._sessions import export_cmd

    data = image_bytes("PNG")
    recorder = await record_conversation(_conversation(data, 2), EchoServer().transport(), tmp_path)
    out = tmp_path / "copy" / "exported.jsonl"
    out.parent.mkdir()
    export_cmd(recorder.session_id, out, force=False)
    assert [p.read_bytes() for p in blobs_dir(out).iterdir()] == [data]
    copied = load_session(out)
    assert not copied.problems
    assert [e.body for e in copied.exchanges] == [
        e.body for e in load_session(recorder.path).exchanges
    ]
