"""``sparkcode acp`` over real stdio runs the registry's operations as the TUI does:
``/effort medium`` reaches the next request, ``/export`` writes the transcript."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from acp import text_block

from tests.sparkcode.acp.client import EditorClient, spawn
from tests.support.http_server import serve, url
from tests.support.scripted import Reply

pytestmark = pytest.mark.slow


async def test_effort_medium_and_export_over_acp(workspace: Path, sparkcode_home: Path) -> None:
    (workspace / "notes").mkdir()  # a directory: the transcript goes in it by its ID
    client = EditorClient()
    with serve([Reply(content=["first answer"]), Reply(content=["second"])]) as server:
        async with spawn(client, "--endpoint", url(server), home=sparkcode_home, cwd=workspace) as (
            conn,
            _,
        ):
            await conn.initialize(protocol_version=1)
            sid = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            await conn.prompt(session_id=sid, prompt=[text_block("/effort medium")])
            said_effort = client.text()
            await conn.prompt(session_id=sid, prompt=[text_block("hello there")])
            before = len(client.text())
            await conn.prompt(session_id=sid, prompt=[text_block("/export notes/")])
            exported = client.text()[before:]
            before = len(client.text())
            await conn.prompt(session_id=sid, prompt=[text_block("/export notes/")])
            again = client.text()[before:]
            await conn.prompt(session_id=sid, prompt=[text_block("/effort loud")])
            refused = client.text()
        requests = list(server.requests)
    commands = client.of("available_commands_update")[0].available_commands
    export = next(c for c in commands if c.name == "export")
    assert export.input is not None and export.input.root.hint == "[md|html] [PATH]"
    assert said_effort == "reasoning effort: medium"
    assert requests[-1]["reasoning_effort"] == "medium"
    found = re.search(r"exported the transcript of session (\w+) \(md\) to (\S+)", exported)
    assert found is not None, exported
    path = Path(found.group(2))
    assert path.parent == workspace / "notes" and path.name == f"{found.group(1)}.md"
    text = path.read_text()
    assert "hello there" in text and "first answer" in text
    assert again.startswith("/export failed: ") and "exists; give another PATH" in again
    assert refused.endswith("/effort failed: usage: /effort none|minimal|low|medium|high|xhigh|max")
