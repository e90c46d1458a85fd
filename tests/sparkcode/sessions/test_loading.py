"""Damaged session files: corrupt lines, a cut last line, a SIGKILL mid-stream."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engine.errors import UserError
from engine.paths import Paths
from sparkcode.cli import app
from sparkcode.sessions import (
    SessionFileError,
    SessionStore,
    exchange_output,
    load_session,
    quick_summary,
    summarize,
)
from tests.support import ROOT
from tests.support.sessions import EchoServer, agentish_turns, record_conversation


async def _recorded(paths: Paths) -> Path:
    server = EchoServer()
    recorder = await record_conversation(
        agentish_turns("x")[:3], server.transport(), paths.data_dir
    )
    return recorder.path


async def test_corrupt_lines_are_named_and_the_rest_loads(paths: Paths) -> None:
    path = await _recorded(paths)
    lines = path.read_bytes().split(b"\n")
    intact = load_session(path)
    # Damage a chunk line of request 1 and an end line of request 2.
    chunk_line = next(i for i, line in enumerate(lines) if b'"kind":"chunk","req":1' in line)
    lines[chunk_line] = lines[chunk_line][:25] + b"\x00garbage"
    lines.insert(5, b"{not json at all")
    path.write_bytes(b"\n".join(lines))
    session = load_session(path)
    assert [(p.line, p.path) for p in session.problems] == [(6, path), (chunk_line + 2, path)]
    assert "invalid JSON" in str(session.problems[0])
    assert str(session.problems[0]).startswith(f"{path}:6: ")
    # Everything else is there: three requests, all but one chunk.
    assert len(session.exchanges) == 3
    assert (
        sum(len(e.chunks) for e in session.exchanges)
        == sum(len(e.chunks) for e in intact.exchanges) - 1
    )
    assert (
        exchange_output(session.exchanges[2]).content
        == exchange_output(intact.exchanges[2]).content
    )


async def test_cli_warns_with_the_line_and_still_shows(paths: Paths) -> None:
    path = await _recorded(paths)
    with path.open("ab") as fh:
        fh.write(b'{"kind":"chunk","req":99,"t_ns":1,"data":"x"}\n')
    result = CliRunner().invoke(app, ["sessions", "show", path.stem[:6]])
    assert result.exit_code == 0, result.output
    assert "request 99, which has no request record" in result.stderr
    assert f"{path}:" in result.stderr
    assert "echo: unrelated filler" in result.stdout


async def test_cut_last_line_is_dropped_quietly(paths: Paths) -> None:
    path = await _recorded(paths)
    data = path.read_bytes()
    path.write_bytes(data[:-20])  # the last record loses its end and its newline
    session = load_session(path)
    assert session.problems == [] and session.truncated_tail
    assert len(session.exchanges) == 3


def test_not_a_session_file(tmp_path: Path) -> None:
    bad = tmp_path / "x.jsonl"
    bad.write_text("hello\n")
    with pytest.raises(SessionFileError, match="not a sparkcode session file"):
        load_session(bad)
    with pytest.raises(SessionFileError, match="does not exist"):
        load_session(tmp_path / "missing.jsonl")


async def test_ids_resolve_by_unique_prefix(paths: Paths) -> None:
    store = SessionStore(paths.sessions_dir)
    paths.sessions_dir.mkdir(parents=True)
    for name in ("abc123000000", "abd456000000"):
        (paths.sessions_dir / f"{name}.jsonl").write_text(
            json.dumps({"kind": "header", "session_id": name}) + "\n"
        )
    assert store.resolve("abc").stem == "abc123000000"
    with pytest.raises(UserError, match="ambiguous"):
        store.resolve("ab")
    with pytest.raises(UserError, match="no session with ID 'zz'"):
        store.resolve("zz")
    result = CliRunner().invoke(app, ["sessions", "show", "zz"])
    assert result.exit_code != 0


RECORD_SCRIPT = """
import asyncio, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from tests.support.sessions import EchoServer
from sparkcode.agent.wire.client import ChatClient
from engine.paths import Paths
from sparkcode.sessions import start_recording

async def main():
    server = EchoServer(delay_s=0.02)
    recorder, transport = start_recording("http://scripted.test/v1", workspace=Path("."),
                                          paths=Paths.from_env(), inner=server.transport())
    print(recorder.path, flush=True)
    client = ChatClient("http://scripted.test/v1", "m", transport=transport)
    words = " ".join(f"w{{i}}" for i in range(5000))
    async with client.stream_chat([{{"role": "user", "content": words}}]) as stream:
        async for _ in stream:
            pass

asyncio.run(main())
"""


def test_sigkill_mid_stream_leaves_a_loadable_file(paths: Paths, tmp_path: Path) -> None:
    root = str(ROOT)
    script = tmp_path / "record.py"
    script.write_text(RECORD_SCRIPT.format(root=root))
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "SPARKCODE_HOME": str(paths.config_dir.parent)},
    )
    try:
        assert proc.stdout is not None
        path = Path(proc.stdout.readline().strip())
        deadline = time.monotonic() + 60
        while not path.exists() or path.read_bytes().count(b'"kind":"chunk"') < 40:
            assert time.monotonic() < deadline, "the recorder wrote no chunks"
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    on_disk = path.read_bytes().count(b'"kind":"chunk"')
    session = load_session(path)
    assert session.problems == []
    exchange = session.exchanges[0]
    assert not exchange.complete  # no end record: the stream was cut
    # At most the last partial chunk is missing.
    assert len(exchange.chunks) >= on_disk - 1 >= 39
    output = exchange_output(exchange)
    expected = ["echo:"] + [f" w{i}" for i in range(len(output.pieces) - 1)]
    assert [p.text for p in output.pieces] == expected


async def test_quick_summary_matches_the_full_load(paths: Paths) -> None:
    path = await _recorded(paths)
    with path.open("ab") as fh:
        fh.write(b"{broken\n")
    full = summarize(load_session(path))
    quick = quick_summary(path)
    assert quick == full
    assert (quick.requests, quick.completion_tokens, quick.problems) == (3, 16, 1)
