"""Recording through the agent's client: exact bytes, timing, usage, redaction, events."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import httpx
import pytest

from engine.paths import Paths
from sparkcode.agent.core import events as ev
from sparkcode.agent.wire.client import ChatClient
from sparkcode.sessions import (
    REDACTED,
    SessionRecorder,
    event_recorder,
    exchange_output,
    load_session,
    start_recording,
)
from sparkcode.sessions import _appendlog as appendlog
from sparkcode.sessions._appendlog import AppendLog
from tests.support.sessions import EchoServer, agentish_turns, record_conversation


async def test_records_request_chunks_usage_exactly(tmp_path: Path) -> None:
    server = EchoServer()
    recorder = await record_conversation(
        agentish_turns("file text")[:2], server.transport(), tmp_path
    )
    session = load_session(recorder.path)
    assert session.problems == [] and not session.truncated_tail
    assert session.header["session_id"] == recorder.session_id
    assert session.header["workspace"] == str(tmp_path)
    assert session.engine["base_url"] == "http://scripted.test/v1"
    assert len(session.exchanges) == 2
    first = session.exchanges[0]
    # The body on file is the exact body the client sent.
    assert json.loads(first.body) == server.requests[0]
    assert first.status == 200 and first.complete
    assert first.response_header("content-type") == "text/event-stream"
    times = [c.t_ns for c in first.chunks]
    assert times == sorted(times) and times[0] >= first.t_ns
    body = first.response_bytes
    assert body.endswith(b"data: [DONE]\n\n")
    assert first.usage is not None and first.usage["completion_tokens"] == 5
    output = exchange_output(first)
    assert output.content == "echo: hello there ."
    assert output.pieces_are_tokens is True
    assert [p.token for p in output.pieces] == [0, 1, 2, 3]
    # Each end record counts what was recorded, though the client closes the stream
    # itself after [DONE] rather than reading it to its end.
    lines = recorder.path.read_bytes().rstrip(b"\0").decode().splitlines()
    ends = [json.loads(line) for line in lines if '"kind":"end"' in line]
    assert [(e["chunks"], e["bytes"]) for e in ends] == [
        (len(x.chunks), len(x.response_bytes)) for x in session.exchanges
    ]
    assert all(e["chunks"] > 0 for e in ends)


async def test_secrets_never_reach_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-live-0123456789abcdef"
    monkeypatch.setenv("SCRIPTED_API_KEY", key)
    monkeypatch.setenv("SOME_SERVICE_TOKEN", "tok-9876543210")
    server = EchoServer()
    turns = [[{"role": "user", "content": f"my token is tok-9876543210 and key {key}"}]]
    recorder = await record_conversation(
        turns, server.transport(), tmp_path, api_key_env="SCRIPTED_API_KEY"
    )
    # The server did get the credentials...
    assert server.requests and key in json.dumps(server.requests[0])
    raw = recorder.path.read_text(encoding="utf-8")
    # ...the file never did, neither in headers, body nor echoed response.
    assert key not in raw and "tok-9876543210" not in raw
    session = load_session(recorder.path)
    headers = dict(session.exchanges[0].request_headers)
    assert headers["authorization"] == f"Bearer {REDACTED}"
    assert REDACTED in exchange_output(session.exchanges[0]).content


def test_engine_env_secrets_are_redacted(tmp_path: Path) -> None:
    recorder = SessionRecorder(
        tmp_path,
        workspace=tmp_path,
        engine={
            "env": {"HF_TOKEN": "hf_abcdefghijkl", "VLLM_CPU_KVCACHE_SPACE": "1"},
            "argv": ["vllm", "--api-key", "hf_abcdefghijkl"],
        },
    )
    recorder.close()
    raw = recorder.path.read_text(encoding="utf-8")
    # Values of secret-named variables are gone, also where they appear elsewhere.
    assert "hf_abcdefghijkl" not in raw
    session = load_session(recorder.path)
    assert session.engine["env"] == {"HF_TOKEN": REDACTED, "VLLM_CPU_KVCACHE_SPACE": "1"}
    assert session.engine["argv"] == ["vllm", "--api-key", REDACTED]


async def test_agent_events_are_recorded_but_not_stream_deltas(tmp_path: Path) -> None:
    recorder = SessionRecorder(tmp_path, workspace=tmp_path, engine={})
    on_event = event_recorder(recorder)
    on_event(ev.TurnStarted(turn=1, user_text="fix it"))
    on_event(ev.ContentDelta(text="streamed"))
    on_event(
        ev.ToolCallStarted(
            call_id="c1", name="bash", arguments={"cmd": "ls"}, raw_arguments='{"cmd": "ls"}'
        )
    )
    on_event(ev.ApprovalResolved(call_id="c1", tool="bash", approved=True, by="user"))
    on_event(ev.ToolCallFinished(call_id="c1", name="bash", result="a.txt"))
    on_event(ev.UndoApplied(snapshot="s1", changed=("a.txt",)))
    on_event(
        ev.TurnFinished(
            reason="stop", content="done", requests=1, prompt_tokens=3, completion_tokens=2
        )
    )
    recorder.close()
    session = load_session(recorder.path)
    assert [e.type for e in session.events] == [
        "TurnStarted",
        "ToolCallStarted",
        "ApprovalResolved",
        "ToolCallFinished",
        "UndoApplied",
        "TurnFinished",
    ]
    assert session.events[1].data["arguments"] == {"cmd": "ls"}
    assert session.events[4].data["changed"] == ["a.txt"]


async def test_monitoring_polls_are_not_recorded(tmp_path: Path) -> None:
    server = EchoServer()

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(200, text="vllm:x 1\n")
        return await server.handle(request)

    recorder, transport = start_recording(
        "http://scripted.test/v1",
        workspace=tmp_path,
        paths=Paths.from_env(),
        inner=httpx.MockTransport(handler),
    )
    client = ChatClient("http://scripted.test/v1", "m", transport=transport)
    assert await client.fetch_metrics() == "vllm:x 1\n"
    models = await client.list_models()
    assert models[0].id == "m"
    # Nothing but a model listing yet: no file (connect-and-quit leaves no empty session).
    assert not recorder.path.exists()
    async with client.stream_chat([{"role": "user", "content": "hi"}]) as stream:
        async for _ in stream:
            pass
    await client.aclose()
    recorder.close()
    session = load_session(recorder.path)
    assert [e.path for e in session.exchanges] == ["/models", "/chat/completions"]
    assert session.exchanges[0].response_bytes.startswith(b'{"object":"list"')


async def test_connect_and_quit_records_nothing(tmp_path: Path) -> None:
    recorder, transport = start_recording(
        "http://scripted.test/v1",
        workspace=tmp_path,
        paths=Paths.from_env(),
        inner=EchoServer().transport(),
    )
    client = ChatClient("http://scripted.test/v1", "m", transport=transport)
    await client.list_models()
    await client.aclose()
    recorder.close()
    event_recorder(recorder)(ev.Notice(message="late"))
    assert not recorder.path.exists()


async def test_a_stream_closed_early_is_marked(tmp_path: Path) -> None:
    server = EchoServer()
    recorder, transport = start_recording(
        "http://scripted.test/v1",
        workspace=tmp_path,
        paths=Paths.from_env(),
        inner=server.transport(),
    )
    client = ChatClient("http://scripted.test/v1", "m", transport=transport)
    async with client.stream_chat([{"role": "user", "content": "a b c d e f"}]) as stream:
        async for _ in stream:
            break
    await client.aclose()
    recorder.close()
    exchange = load_session(recorder.path).exchanges[0]
    assert not exchange.complete and exchange.error is not None
    assert "closed" in exchange.error


def test_write_failure_stops_recording_and_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    errors: list[OSError] = []
    recorder = SessionRecorder(tmp_path, workspace=tmp_path, engine={}, on_error=errors.append)

    def full(self: AppendLog, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(AppendLog, "append", full)
    recorder.chunk(0, b"data: x\n\n")
    assert [e.errno for e in errors] == [errno.ENOSPC] and recorder.closed
    recorder.chunk(0, b"more")  # later writes are no-ops, never raise
    assert len(errors) == 1
    assert load_session(recorder.path).header["session_id"] == recorder.session_id


@pytest.mark.parametrize("mode", ["mapped", "mapped-unpopulated", "plain"])
@pytest.mark.parametrize("window", [8192, 1 << 20])
def test_append_log_crosses_windows_and_trims_on_close(
    tmp_path: Path, mode: str, window: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    mapped = mode != "plain"
    if not mapped:  # a file system that cannot reserve blocks: plain writes

        def unsupported(fd: int, offset: int, length: int) -> None:
            raise OSError(errno.EOPNOTSUPP, "not supported")

        monkeypatch.setattr(os, "posix_fallocate", unsupported)
    if mode == "mapped-unpopulated":  # a kernel before 5.14: madvise refuses the advice
        monkeypatch.setattr(appendlog, "MADV_POPULATE_WRITE", 0x7FFF)
    log = AppendLog(tmp_path / "log", window=window)
    pieces = [bytes([65 + n % 26]) * (100 + n * 37) + b"\n" for n in range(120)]
    for n, piece in enumerate(pieces):
        log.append(piece)
        # Visible to any reader at once (another process would see the same pages).
        assert (tmp_path / "log").read_bytes()[: log.size].endswith(piece)
        if n % 17 == 0:
            log.sync()  # written back pages are write-protected again: copies must still land
    log.sync()
    on_disk = (tmp_path / "log").read_bytes()
    if mapped:
        assert len(on_disk) > log.size and on_disk[log.size :].strip(b"\x00") == b""
    log.close()
    log.close()
    assert (tmp_path / "log").read_bytes() == b"".join(pieces)


def test_loader_ignores_the_reserved_tail_of_an_unclosed_file(tmp_path: Path) -> None:
    recorder = SessionRecorder(tmp_path, workspace=tmp_path, engine={})
    recorder.event("Notice", {"message": "hi"})
    recorder.sync()
    # Not closed (as after a crash): the file still ends in reserved zero bytes.
    assert recorder.path.read_bytes().endswith(b"\x00")
    session = load_session(recorder.path)
    assert session.problems == [] and not session.truncated_tail
    assert [e.type for e in session.events] == ["Notice"]
    recorder.close()
