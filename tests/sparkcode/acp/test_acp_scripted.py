"""``sparkcode acp`` over real stdio, driven by the SDK's client, against the scripted
server over HTTP: the event mapping, approvals, cancel, load, modes, commands."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import pytest
from acp import RequestError, image_block, text_block

from tests.sparkcode.acp.client import EditorClient, spawn
from tests.support.http_server import serve, url
from tests.support.images import image_bytes
from tests.support.scripted import Reply

pytestmark = pytest.mark.slow


def write(path: str, content: str) -> tuple[str, str]:
    return ("write_file", json.dumps({"path": path, "content": content}))


async def test_a_prompt_streams_thinking_answer_usage_and_an_approved_edit_as_a_diff(
    workspace: Path, sparkcode_home: Path
) -> None:
    (workspace / "a.txt").write_text("old\n")
    todo = ("todo", json.dumps({"action": "add", "items": ["write a.txt", "check it"]}))
    replies = [
        Reply(reasoning=["let me ", "think"], tool_calls=[todo]),
        Reply(tool_calls=[write("a.txt", "new\n")]),
        Reply(content=["Done", "."]),
    ]
    client = EditorClient(answer="allow_once")
    with serve(replies) as server:
        async with spawn(client, "--endpoint", url(server), home=sparkcode_home, cwd=workspace) as (
            conn,
            _,
        ):
            init = await conn.initialize(protocol_version=1)
            assert init.agent_capabilities is not None
            assert init.agent_capabilities.load_session
            assert init.agent_capabilities.prompt_capabilities is not None
            assert not init.agent_capabilities.prompt_capabilities.image
            new = await conn.new_session(cwd=str(workspace), mcp_servers=[])
            assert new.modes is not None
            assert [m.id for m in new.modes.available_modes] == [
                "sandbox",
                "ask",
                "auto-edit",
                "full-auto",
                "plan",
            ]
            await conn.set_session_mode(session_id=new.session_id, mode_id="ask")
            done = await conn.prompt(session_id=new.session_id, prompt=[text_block("go")])
    assert done.stop_reason == "end_turn"
    assert done.field_meta is not None and done.field_meta["sparkcode"]["requests"] == 3
    assert client.text("agent_thought_chunk") == "let me think"
    assert client.text() == "Done."
    commands = client.of("available_commands_update")[0].available_commands
    assert {"undo", "compact", "context"} <= {c.name for c in commands}
    plan = client.of("plan")[0]
    assert [(e.content, e.status) for e in plan.entries] == [
        ("write a.txt", "pending"),
        ("check it", "pending"),
    ]
    # The edit asked first (mode ask), with the diff, and the three ACP choices.
    ((call, options),) = client.permissions
    assert [o.kind for o in options] == ["allow_once", "allow_always", "reject_once"]
    assert call.content is not None and "+new" in call.content[0].content.text
    started = [u for u in client.of("tool_call") if u.title == "write_file a.txt"]
    assert started and started[0].kind == "edit"
    finished = [
        u for u in client.of("tool_call_update") if u.tool_call_id == started[0].tool_call_id
    ]
    assert finished[-1].status == "completed"
    diff = finished[-1].content[0]
    assert (diff.type, diff.old_text, diff.new_text) == ("diff", "old\n", "new\n")
    assert diff.path == str(workspace / "a.txt")
    assert (workspace / "a.txt").read_text() == "new\n"
    usage = client.of("usage_update")
    assert usage and usage[-1].size == 4096 and usage[-1].used > 0
    assert "decode_tok_s" in usage[-1].field_meta["sparkcode"]


async def test_a_rejected_approval_changes_nothing_and_always_stops_asking(
    workspace: Path, sparkcode_home: Path
) -> None:
    # A refused call ends the turn (reason "denied"): no request follows it.
    replies = [
        Reply(tool_calls=[write("x.txt", "1\n")]),
        Reply(tool_calls=[write("x.txt", "2\n")]),
        Reply(content=["ok"]),
        Reply(tool_calls=[write("x.txt", "3\n")]),
        Reply(content=["ok"]),
    ]
    client = EditorClient(answer="reject_once")
    with serve(replies) as server:
        async with spawn(client, "--endpoint", url(server), home=sparkcode_home, cwd=workspace) as (
            conn,
            _,
        ):
            await conn.initialize(protocol_version=1)
            sid = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            await conn.set_session_mode(session_id=sid, mode_id="ask")
            refused = await conn.prompt(session_id=sid, prompt=[text_block("write 1")])
            assert refused.field_meta is not None
            assert refused.field_meta["sparkcode"]["reason"] == "denied"
            assert not (workspace / "x.txt").exists()
            client.answer = "allow_always"
            await conn.prompt(session_id=sid, prompt=[text_block("write 2")])
            await conn.prompt(session_id=sid, prompt=[text_block("write 3")])
    assert len(client.permissions) == 2  # the third write ran without asking
    assert (workspace / "x.txt").read_text() == "3\n"
    failed = [u for u in client.of("tool_call_update") if u.status == "failed"]
    assert len(failed) == 1


async def test_cancel_while_an_approval_waits_ends_the_prompt_cancelled(
    workspace: Path, sparkcode_home: Path
) -> None:
    client = EditorClient(answer=None, hold=asyncio.Event())
    with serve([Reply(tool_calls=[write("y.txt", "y\n")]), Reply(content=["never"])]) as server:
        async with spawn(client, "--endpoint", url(server), home=sparkcode_home, cwd=workspace) as (
            conn,
            _,
        ):
            await conn.initialize(protocol_version=1)
            sid = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            await conn.set_session_mode(session_id=sid, mode_id="ask")
            prompt = asyncio.create_task(
                conn.prompt(session_id=sid, prompt=[text_block("write y")])
            )
            await asyncio.wait_for(client.asked.wait(), 60)
            await conn.cancel(session_id=sid)
            # The cancel alone ends the turn: Toad 0.6.20 never answers a pending
            # approval after session/cancel, though ACP says the editor should.
            done = await asyncio.wait_for(prompt, 60)
            assert client.hold is not None
            client.hold.set()  # the late answer (`cancelled`) is dropped
            # The session goes on after a cancel.
            again = await conn.prompt(session_id=sid, prompt=[text_block("/context")])
    assert done.stop_reason == "cancelled"
    assert not (workspace / "y.txt").exists()
    assert again.stop_reason == "end_turn" and "context window" in client.text()


async def test_a_recorded_session_is_loaded_replayed_and_continued(
    workspace: Path, sparkcode_home: Path
) -> None:
    (workspace / "n.txt").write_text("n\n")
    read = ("read_file", json.dumps({"path": "n.txt"}))
    replies = [
        Reply(tool_calls=[read]),
        Reply(content=["It says n."]),
        Reply(content=["Still n."]),
        Reply(content=["Third."]),
    ]
    with serve(replies) as server:
        first = EditorClient()
        async with spawn(first, "--endpoint", url(server), home=sparkcode_home, cwd=workspace) as (
            conn,
            _,
        ):
            await conn.initialize(protocol_version=1)
            sid = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            await conn.prompt(session_id=sid, prompt=[text_block("what is in n.txt?")])
        for answer in ("Still n.", "Third."):  # a new agent process each time, as an editor
            later = EditorClient()
            async with spawn(
                later, "--endpoint", url(server), home=sparkcode_home, cwd=workspace
            ) as (conn, _):
                await conn.initialize(protocol_version=1)
                await conn.load_session(cwd=str(workspace), session_id=sid, mcp_servers=[])
                await asyncio.sleep(0.1)  # the notifications' handlers, already received
                # ACP: the conversation is shown again before session/load answers.
                assert "what is in n.txt?" in later.text("user_message_chunk")
                await conn.prompt(session_id=sid, prompt=[text_block("and now?")])
            assert answer in later.text()
    # The first load replayed the conversation, tool call included.
    assert "what is in n.txt?" in later.text("user_message_chunk")
    assert "It says n." in later.text()
    assert any(u.title == "read_file n.txt" for u in later.of("tool_call"))
    # The third request carried the whole conversation: the second load followed the
    # chain of recordings to the newest one.
    last = server.requests[-1]["messages"]
    users = [m["content"] for m in last if m["role"] == "user"]
    assert users == ["what is in n.txt?", "and now?", "and now?"]


async def test_bad_requests_get_errors_naming_the_problem(
    workspace: Path, sparkcode_home: Path
) -> None:
    client = EditorClient()
    with serve([]) as server:
        async with spawn(client, "--endpoint", url(server), home=sparkcode_home, cwd=workspace) as (
            conn,
            _,
        ):
            await conn.initialize(protocol_version=1)
            with pytest.raises(RequestError) as unknown:
                await conn.prompt(session_id="feedfacecafe", prompt=[text_block("hi")])
            with pytest.raises(RequestError) as missing:
                await conn.load_session(
                    cwd=str(workspace), session_id="0123456789ab", mcp_servers=[]
                )
            sid = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            with pytest.raises(RequestError) as mode:
                await conn.set_session_mode(session_id=sid, mode_id="yolo")
            with pytest.raises(RequestError) as relative:
                await conn.new_session(cwd="relative/dir", mcp_servers=[])
            effort = await conn.prompt(session_id=sid, prompt=[text_block("/effort huge")])
    assert unknown.value.code == -32002 and "feedfacecafe" in str(unknown.value)
    assert "0123456789ab" in str(missing.value)
    assert "yolo" in str(mode.value)
    assert "absolute" in str(relative.value)
    assert effort.stop_reason == "end_turn" and "/effort failed" in client.text()


async def test_a_malformed_line_gets_a_json_rpc_error_and_the_agent_keeps_running(
    workspace: Path, sparkcode_home: Path
) -> None:
    import os
    import sys

    from tests.support import ROOT

    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sparkcode",
        "acp",
        "--endpoint",
        "http://127.0.0.1:9",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=workspace,
        env={**os.environ, "SPARKCODE_HOME": str(sparkcode_home), "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdin is not None and proc.stdout is not None
    lines = [
        b"{this is not json\n",
        b"[1, 2]\n",
        b'{"jsonrpc":"2.0","id":7,"method":"no/such"}\n',
        b'{"jsonrpc":"2.0","id":8,"method":"initialize","params":{"protocolVersion":1}}\n',
    ]
    for line in lines:
        proc.stdin.write(line)
    await proc.stdin.drain()
    answers = [json.loads(await asyncio.wait_for(proc.stdout.readline(), 60)) for _ in range(4)]
    proc.stdin.close()
    await asyncio.wait_for(proc.wait(), 30)
    assert [a.get("error", {}).get("code") for a in answers] == [-32700, -32600, -32601, None]
    assert answers[0]["id"] is None and answers[2]["id"] == 7
    assert answers[3]["id"] == 8 and answers[3]["result"]["protocolVersion"] == 1
    # Nothing else reached stdout: the pipe held exactly these four answers.
    assert await proc.stdout.read() == b""


async def test_an_image_prompt_reaches_a_vision_model_and_is_refused_by_name_otherwise(
    workspace: Path, sparkcode_home: Path
) -> None:
    # Issue 23: image prompts are offered when the model takes images (here --vision
    # with --endpoint); the editor's base64 goes to the model as the TUI's data URL.
    png = image_bytes("PNG", (20, 10))
    shot = base64.b64encode(png).decode()
    client = EditorClient(answer="allow_once")
    with serve([Reply(content=["a red box"])]) as server:
        async with spawn(
            client, "--endpoint", url(server), "--vision", home=sparkcode_home, cwd=workspace
        ) as (conn, _):
            init = await conn.initialize(protocol_version=1)
            assert init.agent_capabilities is not None
            assert init.agent_capabilities.prompt_capabilities is not None
            assert init.agent_capabilities.prompt_capabilities.image
            new = await conn.new_session(cwd=str(workspace), mcp_servers=[])
            with pytest.raises(RequestError, match="image 1: it is not a PNG, JPEG or WebP"):
                await conn.prompt(
                    session_id=new.session_id,
                    prompt=[
                        text_block("what is it?"),
                        image_block(base64.b64encode(b"GIF89a....").decode(), "image/gif"),
                    ],
                )
            done = await conn.prompt(
                session_id=new.session_id,
                prompt=[text_block("what is it?"), image_block(shot, "image/png")],
            )
        assert done.stop_reason == "end_turn" and len(server.requests) == 1
        content = server.requests[0]["messages"][-1]["content"]
        assert content[0] == {"type": "text", "text": "what is it?"}
        assert content[1]["image_url"]["url"] == "data:image/png;base64," + shot
    # Without vision the same prompt is refused, naming the model; nothing is sent.
    with serve([]) as server:
        async with spawn(client, "--endpoint", url(server), home=sparkcode_home, cwd=workspace) as (
            conn,
            _,
        ):
            await conn.initialize(protocol_version=1)
            new = await conn.new_session(cwd=str(workspace), mcp_servers=[])
            with pytest.raises(RequestError, match="model scripted is text-only here"):
                await conn.prompt(
                    session_id=new.session_id,
                    prompt=[text_block("what is it?"), image_block(shot, "image/png")],
                )
        assert server.requests == []
