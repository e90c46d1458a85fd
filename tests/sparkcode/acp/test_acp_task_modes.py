"""``sparkcode acp`` over real stdio with the SDK's client, against the scripted server:
the ``task`` tool is a tool call carrying its summary, a session with a task loads
again, and the session mode comes back with a load."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from acp import text_block

from engine.paths import Paths
from tests.sparkcode.acp.client import EditorClient, spawn
from tests.support.http_server import serve, url
from tests.support.scripted import Reply

pytestmark = pytest.mark.slow

SUMMARY = "greet is in hello.py, line 1."
ASK = ("task", json.dumps({"description": "find greet", "prompt": "Where is greet?"}))


async def test_a_task_is_a_tool_call_with_its_summary_and_the_session_loads_again(
    workspace: Path, sparkcode_home: Path
) -> None:
    (workspace / "hello.py").write_text("def greet():\n    return 'hi'\n")
    read = ("read_file", json.dumps({"path": "hello.py"}))
    replies = [
        Reply(tool_calls=[ASK]),
        Reply(tool_calls=[read]),
        Reply(content=[SUMMARY]),
        Reply(content=["It is in hello.py."]),
        Reply(content=["Still there."]),
    ]
    with serve(replies) as server:
        client = EditorClient()
        async with spawn(client, "--endpoint", url(server), home=sparkcode_home, cwd=workspace) as (
            conn,
            _,
        ):
            await conn.initialize(protocol_version=1)
            sid = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            done = await conn.prompt(session_id=sid, prompt=[text_block("where is greet?")])
        later = EditorClient()
        async with spawn(later, "--endpoint", url(server), home=sparkcode_home, cwd=workspace) as (
            conn,
            _,
        ):
            await conn.initialize(protocol_version=1)
            await conn.load_session(cwd=str(workspace), session_id=sid, mcp_servers=[])
            again = await conn.prompt(session_id=sid, prompt=[text_block("still?")])
    assert done.stop_reason == "end_turn" and done.field_meta is not None
    assert done.field_meta["sparkcode"]["requests"] == 2  # the conversation's own two
    (task,) = [u for u in client.of("tool_call") if u.title == "task: find greet"]
    assert task.kind == "read"
    final = [u for u in client.of("tool_call_update") if u.tool_call_id == task.tool_call_id]
    assert final[-1].status == "completed" and final[-1].raw_output == {"output": SUMMARY}
    # The sub-conversation's read is not a tool call of the editor's conversation.
    assert not [u for u in client.of("tool_call") if u.title == "read_file hello.py"]
    # Loaded: the task shown again with its summary, and the conversation went on from
    # its own history (the sub-conversation's messages are not in it).
    assert any(u.title == "task: find greet" for u in later.of("tool_call"))
    assert SUMMARY in json.dumps([u.model_dump(mode="json") for u in later.of("tool_call_update")])
    assert again.stop_reason == "end_turn" and "Still there." in later.text()
    roles = [m["role"] for m in server.requests[-1]["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]


async def test_the_session_mode_comes_back_with_a_load(
    workspace: Path, sparkcode_home: Path
) -> None:
    edit = ("write_file", json.dumps({"path": "a.txt", "content": "a\n"}))
    replies = [Reply(content=["a plan"]), Reply(tool_calls=[edit]), Reply(content=["done"])]
    with serve(replies) as server:
        first = EditorClient(answer="reject_once")
        async with spawn(first, "--endpoint", url(server), home=sparkcode_home, cwd=workspace) as (
            conn,
            _,
        ):
            await conn.initialize(protocol_version=1)
            sid = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            await conn.set_session_mode(session_id=sid, mode_id="plan")
            await conn.prompt(session_id=sid, prompt=[text_block("plan it")])
            await conn.set_session_mode(session_id=sid, mode_id="auto-edit")
            # A session whose mode was switched but that sent nothing leaves no recording.
            idle = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            await conn.set_session_mode(session_id=idle, mode_id="full-auto")
            await asyncio.sleep(0.2)
        later = EditorClient(answer="reject_once")
        async with spawn(later, "--endpoint", url(server), home=sparkcode_home, cwd=workspace) as (
            conn,
            _,
        ):
            await conn.initialize(protocol_version=1)
            loaded = await conn.load_session(cwd=str(workspace), session_id=sid, mcp_servers=[])
            done = await conn.prompt(session_id=sid, prompt=[text_block("write a.txt")])
    assert "[Plan mode" in server.requests[0]["messages"][-1]["content"]
    assert loaded.modes is not None and loaded.modes.current_mode_id == "auto-edit"
    # auto-edit, not the config's default: the edit ran without asking the editor.
    assert done.stop_reason == "end_turn" and later.permissions == []
    assert (workspace / "a.txt").read_text() == "a\n"
    recordings = {p.stem for p in Paths.from_env().sessions_dir.glob("*.jsonl")}
    assert sid in recordings and idle not in recordings
