"""``sparkcode acp`` over real stdio: the model's background job shows as a tool
call, ``/jobs`` lists it and stops it, and a job left running ends with the agent."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from acp import text_block

from tests.sparkcode.acp.client import EditorClient, spawn
from tests.sparkcode.agent.tools.test_jobs import by_cmdline
from tests.support.http_server import serve, url
from tests.support.scripted import Reply

pytestmark = pytest.mark.slow


def background(command: str) -> Reply:
    return Reply(tool_calls=[("bash", json.dumps({"command": command, "background": True}))])


async def test_jobs_over_acp_list_stop_and_end_with_the_agent(
    workspace: Path, sparkcode_home: Path
) -> None:
    replies = [
        background("sleep 61.81"),
        Reply(content=["started one"]),
        background("sleep 61.82 & sleep 61.82 & wait"),
        Reply(content=["started two"]),
    ]
    client = EditorClient(answer="allow_once")
    with serve(replies) as server:
        async with spawn(client, "--endpoint", url(server), home=sparkcode_home, cwd=workspace) as (
            conn,
            _,
        ):
            await conn.initialize(protocol_version=1)
            sid = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            await conn.set_session_mode(session_id=sid, mode_id="full-auto")
            await conn.prompt(session_id=sid, prompt=[text_block("start a watcher")])
            assert len(by_cmdline("sleep", "61.81")) == 1
            before = len(client.text())
            await conn.prompt(session_id=sid, prompt=[text_block("/jobs")])
            listed = client.text()[before:]
            before = len(client.text())
            await conn.prompt(session_id=sid, prompt=[text_block("/jobs stop 3")])
            unknown = client.text()[before:]
            before = len(client.text())
            await conn.prompt(session_id=sid, prompt=[text_block("/jobs stop 1")])
            stopped = client.text()[before:]
            assert by_cmdline("sleep", "61.81") == []
            await conn.prompt(session_id=sid, prompt=[text_block("start two more")])
            assert len(by_cmdline("sleep", "61.82")) == 2
    commands = client.of("available_commands_update")[0].available_commands
    jobs = next(c for c in commands if c.name == "jobs")
    assert jobs.input is not None and jobs.input.root.hint == "stop N (optional)"
    assert "| 1 | running for " in listed and "`sleep 61.81`" in listed
    assert unknown == "/jobs failed: there is no job 3; the jobs are: 1"
    assert stopped.startswith("job 1 (stopped by job_stop after ")
    titles = [u.title for u in client.of("tool_call")]
    assert titles == [
        "bash (background): sleep 61.81",
        "bash (background): sleep 61.82 & sleep 61.82 & wait",
    ]
    deadline = time.monotonic() + 10  # the agent's process has ended: its jobs too
    while by_cmdline("sleep", "61.82"):
        assert time.monotonic() < deadline, "a job outlived the agent"
        await asyncio.sleep(0.1)
