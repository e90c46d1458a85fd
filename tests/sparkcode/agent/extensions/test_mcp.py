"""MCP servers through the official SDK, against a real server the tests start
(``tests/support/mcp_server.py``, over stdio and streamable HTTP)."""

from __future__ import annotations

import io
import json
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from engine.paths import Paths
from sparkcode.agent import Agent, AgentSettings, ChatClient, Permissions
from sparkcode.agent.core.events import ApprovalRequested, Event, ToolCallFinished
from sparkcode.agent.extensions.mcp_tools import McpHub, McpTool
from sparkcode.agent.tools import BwrapStatus, ToolContext, ToolError, default_tools
from sparkcode.cli._run import EXIT_OK, RunRequest, run_headless
from sparkcode.config import Config, ConfigError, McpServerConfig, PermissionRule, parse_config
from sparkcode.start import SessionOptions
from tests.support import ROOT
from tests.support.http_server import serve, url
from tests.support.mcp_config import stdio_server_toml
from tests.support.scripted import Reply, ScriptedServer

NO_BWRAP = BwrapStatus(None, "not needed here")


def stdio_server(name: str, cwd: Path) -> McpServerConfig:
    return McpServerConfig(
        name=name,
        command=sys.executable,
        args=("-m", "tests.support.mcp_server", "stdio"),
        env=(("PYTHONPATH", str(ROOT)),),
        cwd=cwd,
        startup_timeout_s=60,
    )


@pytest.fixture(scope="module")
def mcp_cwd(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp-ws")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def hub(mcp_cwd: Path) -> AsyncIterator[McpHub]:
    hub = await McpHub.start((stdio_server("t", mcp_cwd),), mcp_cwd / "logs")
    yield hub
    await hub.aclose()


def tools_of(hub: McpHub) -> dict[str, McpTool]:
    return {t.name: t for t in hub.tools}


@pytest.mark.asyncio(loop_scope="module")
async def test_a_stdio_servers_tools_are_namespaced_called_and_capped(
    hub: McpHub, mcp_cwd: Path
) -> None:
    assert hub.failures == []
    tools = tools_of(hub)
    assert list(tools) == ["mcp__t__add", "mcp__t__note", "mcp__t__big", "mcp__t__fail"]
    spec = tools["mcp__t__add"].spec()["function"]
    assert spec["parameters"]["required"] == ["a", "b"]
    assert spec["description"] == "[MCP server t] Add two integers."
    ctx = ToolContext(workspace=mcp_cwd, output_cap=500)
    assert (await tools["mcp__t__add"].run({"a": 2, "b": 40}, ctx)).text == "42"
    assert (await tools["mcp__t__note"].run({"text": "hello"}, ctx)).text == "noted: hello"
    assert (mcp_cwd / "notes.txt").read_text() == "hello\n"  # it ran in its cwd
    big = (await tools["mcp__t__big"].run({"n": 100_000}, ctx)).text
    assert len(big) < 700 and "output capped" in big
    with pytest.raises(ToolError, match="fail"):
        await tools["mcp__t__fail"].run({"why": "testing"}, ctx)


@pytest.fixture
def http_port(tmp_path: Path) -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.mcp_server", "http", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            break
        except OSError:
            time.sleep(0.2)
    yield port
    proc.terminate()
    proc.wait(10)


async def test_a_streamable_http_server_and_failing_servers_are_skipped(
    http_port: int, tmp_path: Path
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    servers = (
        McpServerConfig(name="web", url=f"http://127.0.0.1:{http_port}/mcp"),
        McpServerConfig(name="missing", command="/nonexistent/mcp-server"),
        McpServerConfig(
            name="dies",
            command=sys.executable,
            args=("-c", "raise SystemExit(3)"),
            startup_timeout_s=20,
        ),
        McpServerConfig(name="down", url=f"http://127.0.0.1:{closed}/mcp", startup_timeout_s=10),
    )
    hub = await McpHub.start(servers, tmp_path / "logs")
    try:
        assert [t.name for t in hub.tools] == [
            "mcp__web__add",
            "mcp__web__note",
            "mcp__web__big",
            "mcp__web__fail",
        ]
        out = await tools_of(hub)["mcp__web__add"].run(
            {"a": 1, "b": 2}, ToolContext(workspace=tmp_path)
        )
        assert out.text == "3"
        assert len(hub.failures) == 3
        missing, dies, down = hub.failures
        assert "'missing' was skipped" in missing and "No such file" in missing
        assert "'dies' was skipped" in dies and str(tmp_path / "logs" / "dies.log") in dies
        assert "'down' was skipped" in down and "connect" in down.lower()
    finally:
        await hub.aclose()


@pytest.mark.asyncio(loop_scope="module")
async def test_mcp_tools_follow_the_permission_rules(hub: McpHub, workspace: Path) -> None:
    call = ("mcp__t__add", json.dumps({"a": 5, "b": 6}))
    registry = default_tools(hub.tools)

    async def turn(perms: Permissions) -> tuple[list[Event], ScriptedServer]:
        server = ScriptedServer([Reply(tool_calls=[call]), Reply(content=["ok"])])
        client = ChatClient("http://engine.test/v1", "m", transport=server.transport())
        agent = Agent(
            client, workspace, settings=AgentSettings(), permissions=perms, tools=registry
        )
        events = []
        async for event in agent.run_turn("add"):
            events.append(event)
            if isinstance(event, ApprovalRequested):
                event.respond(True)
        return events, server

    events, server = await turn(
        Permissions(Config(), mode="sandbox", bwrap=BwrapStatus("/usr/bin/bwrap"))
    )
    asked = [e for e in events if isinstance(e, ApprovalRequested)]
    assert len(asked) == 1 and asked[0].summary.startswith("MCP t: add")
    assert [e.result for e in events if isinstance(e, ToolCallFinished)] == ["11"]
    names = [[t["function"]["name"] for t in r["tools"]] for r in server.requests]
    assert names[0] == names[1] and names[0][-4:] == [
        "mcp__t__add",
        "mcp__t__note",
        "mcp__t__big",
        "mcp__t__fail",
    ]
    assert server.requests[0]["tools"] == server.requests[1]["tools"]

    allowed = Config(allow=(PermissionRule.parse("mcp__t__*"),))
    events, _ = await turn(Permissions(allowed, mode="ask", bwrap=NO_BWRAP))
    assert not [e for e in events if isinstance(e, ApprovalRequested)]
    assert [e.result for e in events if isinstance(e, ToolCallFinished)] == ["11"]

    events, _ = await turn(Permissions(allowed, mode="plan", bwrap=NO_BWRAP))
    finished = [e for e in events if isinstance(e, ToolCallFinished)]
    assert finished[0].error is not None and "plan mode" in finished[0].error


async def test_sparkcode_run_uses_configured_servers_and_reports_a_failing_one(
    workspace: Path,
) -> None:
    config = Paths.from_env().config_file
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        stdio_server_toml("t") + '[mcp.servers.broken]\ncommand = "/nonexistent/server"\n'
    )
    call = ("mcp__t__add", json.dumps({"a": 20, "b": 22}))
    with serve([Reply(tool_calls=[call]), Reply(content=["42"])]) as server:
        out, err = io.StringIO(), io.StringIO()
        code = await run_headless(
            RunRequest(
                prompt="add",
                workspace=workspace,
                as_json=True,
                endpoint=url(server),
                session=SessionOptions(permission_mode="full-auto", record=False),
            ),
            out=out,
            err=err,
        )
    assert code == EXIT_OK, err.getvalue()
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    assert "note: MCP server 'broken' was skipped: FileNotFoundError" in err.getvalue()
    results = [e["result"] for e in events if e["type"] == "ToolCallFinished"]
    assert results == ["42"]


def test_mcp_config_tables(tmp_path: Path) -> None:
    text = (
        '[mcp.servers.files]\ncommand = "uvx"\nargs = ["srv", "."]\nenv = { K = "v" }\n'
        '[mcp.servers.web]\nurl = "http://127.0.0.1:8000/mcp"\ncall_timeout_s = 5\n'
    )
    config = parse_config(text, tmp_path / "config.toml")
    files, web = config.mcp_servers
    assert (files.name, files.command, files.args, files.env) == (
        "files",
        "uvx",
        ("srv", "."),
        (("K", "v"),),
    )
    assert (web.url, web.call_timeout_s) == ("http://127.0.0.1:8000/mcp", 5.0)
    for bad, message in (
        ("[mcp.servers.x]\nargs = []\n", "give either command"),
        ('[mcp.servers.x]\ncommand = "a"\nurl = "http://h"\n', "give either command"),
        ('[mcp.servers."a b"]\ncommand = "a"\n', "only letters, digits"),
        ('[mcp.servers.x]\nurl = "ftp://h"\n', "http:// or https://"),
        ('[mcp.servers.x]\ncommand = "a"\nport = 3\n', "unknown key 'port'"),
        ('[mcp.servers.x]\ncommand = "a"\nenv = { K = 1 }\n', "env must be a table"),
    ):
        with pytest.raises(ConfigError, match=message):
            parse_config(bad, tmp_path / "config.toml")
