"""Background jobs through the agent: the loop against a scripted server, the
approval and sandbox rules a foreground command has, and the session's close."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from engine.paths import Paths
from sparkcode.agent import Agent, AgentSettings, ChatClient, Permissions
from sparkcode.agent.core.events import (
    ApprovalDecision,
    ApprovalRequested,
    Event,
    ToolCallFinished,
    TurnFinished,
)
from sparkcode.agent.tools import Bash, JobTable, Sandbox, ToolContext, find_bwrap
from sparkcode.agent.tools._shell import run_command
from sparkcode.config import Config
from sparkcode.start import SessionOptions, build_session, resolve_target
from tests.sparkcode.agent.tools.test_jobs import alive, by_cmdline, group_members
from tests.support.ports import free_port
from tests.support.scripted import Reply, ScriptedServer


def call(name: str, **args: object) -> tuple[str, str]:
    return name, json.dumps(args)


def make_agent(server: ScriptedServer, workspace: Path, mode: str) -> Agent:
    client = ChatClient("http://engine.test/v1", "m", transport=server.transport())
    perms = Permissions(Config(), mode=mode)  # type: ignore[arg-type]
    return Agent(client, workspace, settings=AgentSettings(), permissions=perms)


@pytest.fixture
def outside() -> Iterator[Path]:
    """A host directory outside the workspace and outside /tmp."""
    path = Path(tempfile.mkdtemp(prefix="sparkcode-test-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def test_the_model_starts_a_server_reads_it_and_stops_it(workspace: Path) -> None:
    port = free_port()
    (workspace / "index.html").write_text("<p>up</p>\n")
    command = f"{sys.executable} -m http.server {port} --bind 127.0.0.1"
    server = ScriptedServer(
        [
            Reply(tool_calls=[call("bash", command=command, background=True)]),
            Reply(tool_calls=[call("job_output", job_id=1, wait_s=5)]),
            Reply(tool_calls=[call("job_stop", job_id=1)]),
            Reply(content=["the server answered and is stopped"]),
        ]
    )
    agent = make_agent(server, workspace, "ask")
    asked: list[ApprovalRequested] = []
    results: dict[str, str] = {}
    page = ""
    reasons: list[str] = []
    async for event in agent.run_turn("start a dev server, check it, stop it"):
        if isinstance(event, ApprovalRequested):
            asked.append(event)
            event.respond(True)
        if isinstance(event, ToolCallFinished):
            results[event.name] = event.result
            if event.name == "bash":  # the turn waits here: the server is up meanwhile
                async with httpx.AsyncClient() as client:
                    for _ in range(100):
                        try:
                            page = (await client.get(f"http://127.0.0.1:{port}/")).text
                            break
                        except httpx.ConnectError:
                            await asyncio.sleep(0.1)
        if isinstance(event, TurnFinished):
            reasons.append(event.reason)
    assert reasons == ["stop"]
    assert [a.summary for a in asked] == [f"run in the background: {command}"]
    assert page == "<p>up</p>\n"
    assert results["bash"].startswith("started job 1 (running for ")
    assert "job_output with job_id 1 shows its new output" in results["bash"]
    assert '"GET / HTTP/1.1" 200' in results["job_output"]
    assert results["job_stop"].startswith("job 1 (stopped by job_stop after ")
    job = agent.jobs.get(1)
    assert not alive(job.pid) and group_members(job.pid) == []
    # The model saw each result as the tool message of its call.
    tool_messages = [m["content"] for m in agent.history if m["role"] == "tool"]
    assert tool_messages == [results["bash"], results["job_output"], results["job_stop"]]
    bash_spec = next(t for t in server.requests[0]["tools"] if t["function"]["name"] == "bash")
    assert "background" in bash_spec["function"]["parameters"]["properties"]


async def test_a_declined_background_command_starts_no_job(workspace: Path) -> None:
    server = ScriptedServer(
        [
            Reply(tool_calls=[call("bash", command="sleep 61.51", background=True)]),
            Reply(content=["ok"]),
        ]
    )
    agent = make_agent(server, workspace, "ask")
    async for event in agent.run_turn("start it"):
        if isinstance(event, ApprovalRequested):
            assert event.kind == "shell" and event.summary.startswith("run in the background")
            event.respond(ApprovalDecision(approved=False, reason="not now"))
    assert agent.jobs.jobs == {} and by_cmdline("sleep", "61.51") == []
    result = [m["content"] for m in agent.history if m["role"] == "tool"][0]
    assert result.startswith("the user declined this bash call")


async def test_plan_mode_refuses_a_background_command_that_changes_things(workspace: Path) -> None:
    server = ScriptedServer(
        [
            Reply(tool_calls=[call("bash", command="sleep 61.52", background=True)]),
            Reply(content=["ok"]),
        ]
    )
    agent = make_agent(server, workspace, "plan")
    events: list[Event] = [e async for e in agent.run_turn("start it")]
    assert not [e for e in events if isinstance(e, ApprovalRequested)]
    assert agent.jobs.jobs == {}
    result = [m["content"] for m in agent.history if m["role"] == "tool"][0]
    assert result.startswith("refused: plan mode")


async def test_the_sandbox_stops_a_background_write_outside_as_a_foreground_one(
    workspace: Path, outside: Path, tmp_path: Path
) -> None:
    status = find_bwrap()
    assert status.path is not None, f"this test needs bubblewrap: {status.reason}"
    box = Sandbox(status.path, tmp=tmp_path / "box-tmp")
    target = outside / "x.txt"
    context = ToolContext(workspace=workspace.resolve(), sandbox=box, jobs=JobTable())
    foreground = await run_command(f"echo hi > {target}", context, 20)
    background = await Bash().run({"command": f"echo hi > {target}", "background": True}, context)
    assert background.sandbox_denied == foreground.sandbox_denied == "Read-only file system"
    assert background.text.startswith("job 1 (exited with code 1 after ")
    assert "in the sandbox" in background.text and not target.exists()
    # Through the agent: the user is asked to run it outside, as for a foreground one.
    server = ScriptedServer(
        [
            Reply(tool_calls=[call("bash", command=f"echo hi > {target}", background=True)]),
            Reply(content=["ok"]),
        ]
    )
    client = ChatClient("http://engine.test/v1", "m", transport=server.transport())
    agent = Agent(client, workspace, permissions=Permissions(Config(), bwrap=status))
    assert agent.permissions.mode == "sandbox"
    asked: list[ApprovalRequested] = []
    async for event in agent.run_turn("write it"):
        if isinstance(event, ApprovalRequested):
            asked.append(event)
            event.respond(False)
    assert len(asked) == 1 and asked[0].summary.startswith("run outside the sandbox")
    assert "Read-only file system" in asked[0].detail and not target.exists()
    result = [m["content"] for m in agent.history if m["role"] == "tool"][0]
    assert "the user declined running it outside the sandbox" in result
    box.cleanup()
    await agent.jobs.aclose()


async def test_a_sandboxed_job_is_stopped_with_its_namespace(
    workspace: Path, tmp_path: Path
) -> None:
    status = find_bwrap()
    assert status.path is not None, f"this test needs bubblewrap: {status.reason}"
    box = Sandbox(status.path, tmp=tmp_path / "box-tmp")
    table = JobTable()
    context = ToolContext(workspace=workspace.resolve(), sandbox=box, jobs=table)
    text = (
        await Bash().run(
            {"command": "sleep 61.53 & setsid sleep 61.53 & wait", "background": True}, context
        )
    ).text
    assert text.startswith("started job 1") and "without network" in text
    await table.stop(table.get(1))
    assert by_cmdline("sleep", "61.53") == []
    box.cleanup()


async def test_closing_the_session_ends_every_job(workspace: Path, paths: Paths) -> None:
    target = resolve_target(workspace, paths, endpoint="http://engine.test/v1")
    session = await build_session(
        target,
        SessionOptions(
            record=False, transport=ScriptedServer([]).transport(), permission_mode="full-auto"
        ),
        paths,
    )
    context = ToolContext(workspace=workspace.resolve(), jobs=session.agent.jobs)
    port = free_port()
    await Bash().run(
        {"command": f"{sys.executable} -m http.server {port} --bind 127.0.0.1", "background": True},
        context,
    )
    await Bash().run({"command": "sleep 61.54 & sleep 61.54 & wait", "background": True}, context)
    jobs = list(session.agent.jobs.jobs.values())
    assert [j.running for j in jobs] == [True, True]
    await session.aclose()
    assert [j.running for j in jobs] == [False, False]
    assert all(group_members(j.pid) == [] for j in jobs)
    assert by_cmdline("sleep", "61.54") == []
    assert all(j.state().startswith("stopped by the session's end") for j in jobs)


async def test_a_headless_run_ends_its_jobs_when_it_ends(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    from sparkcode.cli._run import EXIT_OK, RunRequest, run_headless
    from tests.support.http_server import serve, url

    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    replies = [
        Reply(
            tool_calls=[call("bash", command="sleep 61.55 & sleep 61.55 & wait", background=True)]
        ),
        Reply(tool_calls=[call("job_output", job_id=1)]),
        Reply(content=["running"]),
    ]
    with serve(replies) as server:
        out, err = io.StringIO(), io.StringIO()
        code = await run_headless(
            RunRequest(
                prompt="start the watchers",
                workspace=workspace,
                endpoint=url(server),
                session=SessionOptions(record=False, permission_mode="full-auto"),
            ),
            out=out,
            err=err,
        )
        outputs = [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "tool"]
    assert code == EXIT_OK and out.getvalue().strip() == "running"
    assert outputs[0].startswith("started job 1 (running for ")
    assert outputs[1].startswith("job 1 (running for ")
    assert by_cmdline("sleep", "61.55") == []  # the run's end ended the job


async def test_a_sandboxed_foreground_server_is_told_it_ended_with_the_call(
    workspace: Path, tmp_path: Path
) -> None:
    """As in the tmux trial: ``nohup server &`` in the sandbox ends with the call's PID
    namespace; the result says so instead of a bare exit code 0."""
    status = find_bwrap()
    assert status.path is not None, f"this test needs bubblewrap: {status.reason}"
    box = Sandbox(status.path, tmp=tmp_path / "box-tmp")
    context = ToolContext(workspace=workspace.resolve(), sandbox=box)
    text = (
        await Bash(background=False).run(
            {"command": "nohup sleep 61.54 >/dev/null 2>&1 &"}, context
        )
    ).text
    assert text.startswith("exit code 0") and "did not outlive it" in text
    # The namespace's processes are killed as bwrap ends; the kernel may take a moment
    # to reap them on a loaded machine (seen in CI: still listed right after).
    deadline = time.monotonic() + 10
    while by_cmdline("sleep", "61.54") and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert "in the same command" in text and by_cmdline("sleep", "61.54") == []
    box.cleanup()


def test_jobs_says_when_the_profile_offers_no_background_jobs(workspace: Path) -> None:
    """cpu-coder's tools (read, write, edit, bash) have no job tools: /jobs says so
    rather than pointing at a ``background`` argument the model is not shown."""
    from sparkcode.agent.tools import default_tools

    client = ChatClient("http://engine.test/v1", "m", transport=ScriptedServer([]).transport())
    few = Agent(
        client,
        workspace,
        settings=AgentSettings(),
        tools=default_tools(only=["read_file", "write_file", "edit_file", "bash"]),
    )
    assert "this profile does not offer them" in few.jobs.table()
    every = Agent(client, workspace, settings=AgentSettings())
    assert "bash's background: true" in every.jobs.table()
