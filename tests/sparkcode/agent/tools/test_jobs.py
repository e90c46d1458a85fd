"""Background shell jobs on real processes: a real server reached over HTTP and
stopped, exit codes, the output cap, process trees, the exit and signal paths."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import psutil
import pytest

from sparkcode.agent.tools import Bash, JobOutput, JobStop, JobTable, ToolContext, ToolError
from sparkcode.agent.tools._jobs import OUTPUT_KEPT, READ_CAP
from tests.support.ports import free_port


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``."""
    found = []
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return found


def by_cmdline(*argv: str) -> list[psutil.Process]:
    return [
        p
        for p in psutil.process_iter(["cmdline", "status"])
        if p.info["cmdline"] == list(argv) and p.info["status"] != psutil.STATUS_ZOMBIE
    ]


def ctx(workspace: Path, table: JobTable) -> ToolContext:
    return ToolContext(workspace=workspace.resolve(), jobs=table)


async def wait_for_port(port: int, seconds: float = 20) -> None:
    """Until a server answers on ``port``."""
    deadline = time.monotonic() + seconds
    async with httpx.AsyncClient() as client:
        while True:
            try:
                await client.get(f"http://127.0.0.1:{port}/")
                return
            except httpx.ConnectError:
                assert time.monotonic() < deadline, "the server never answered"
                await asyncio.sleep(0.1)


async def start(command: str, context: ToolContext) -> str:
    out = await Bash().run({"command": command, "background": True}, context)
    return out.text


async def test_a_real_server_answers_and_stop_leaves_no_process(workspace: Path) -> None:
    port = free_port()
    (workspace / "hello.txt").write_text("served\n")
    table = JobTable()
    context = ctx(workspace, table)
    text = await start(f"{sys.executable} -m http.server {port} --bind 127.0.0.1", context)
    assert text.startswith("started job 1 (running for ") and "outside the sandbox" in text
    job = table.get(1)
    async with httpx.AsyncClient() as client:
        deadline = time.monotonic() + 20
        while True:
            try:
                response = await client.get(f"http://127.0.0.1:{port}/hello.txt")
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline, "the server never answered"
                await asyncio.sleep(0.1)
    assert response.status_code == 200 and response.text == "served\n"
    seen = (await JobOutput().run({"job_id": 1, "wait_s": 5}, context)).text
    assert seen.startswith("job 1 (running for ") and '"GET /hello.txt HTTP/1.1" 200' in seen
    stopped = (await JobStop().run({"job_id": 1}, context)).text
    assert stopped.startswith("job 1 (stopped by job_stop after ")
    assert not alive(job.pid) and group_members(job.pid) == []
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient() as client:
            await client.get(f"http://127.0.0.1:{port}/")
    again = (await JobStop().run({"job_id": 1}, context)).text
    assert again.startswith("(it had already ended)")


async def test_a_job_that_ends_reports_its_exit_code(workspace: Path) -> None:
    table = JobTable()
    context = ctx(workspace, table)
    quick = await start("echo at once; exit 4", context)
    assert quick.startswith("job 1 (exited with code 4 after ") and quick.endswith("at once")
    slow = await start("sleep 1.5; echo finished; exit 3", context)
    assert slow.startswith("started job 2 (running for ") and "no output yet" in slow
    reads = [(await JobOutput().run({"job_id": 2, "wait_s": 20}, context)).text]
    while "exited" not in reads[-1]:  # the output may come in a read before the exit
        assert len(reads) < 5
        reads.append((await JobOutput().run({"job_id": 2, "wait_s": 20}, context)).text)
    assert reads[-1].startswith("job 2 (exited with code 3 after ")
    assert sum(r.count("\nfinished") for r in reads) == 1  # shown once, never again
    assert table.get(2).returncode == 3
    await table.aclose()


async def test_output_is_capped_in_memory_and_per_read(workspace: Path) -> None:
    table = JobTable()
    context = ctx(workspace, table)
    size = 200_000
    script = f"import sys; sys.stdout.write('x' * {size} + 'END'); sys.stdout.flush()"
    text = await start(f'sleep 1.2; {sys.executable} -c "{script}"', context)
    assert text.startswith("started job 1")
    job = table.get(1)
    await table.settle(job, 20)  # all of it written before the one read
    out = (await JobOutput().run({"job_id": 1}, context)).text
    assert out.startswith("job 1 (exited with code 0 after ")
    assert len(job.output.data) <= OUTPUT_KEPT and job.output.total == size + 3
    body = out.split("\n", 1)[1]
    assert body.startswith("[... ") and " earlier bytes not shown ...]" in body
    shown = body.split("\n", 1)[1]
    assert shown.endswith("END") and len(shown) <= READ_CAP
    assert (await JobOutput().run({"job_id": 1}, context)).text.endswith("(no new output)")
    await table.aclose()


async def test_stop_ends_the_whole_tree_also_a_child_that_ignores_sigterm(workspace: Path) -> None:
    table = JobTable(grace_s=1.0)
    context = ctx(workspace, table)
    marker = "61.37"  # a sleep length nothing else on the machine uses
    stubborn = "61.38"
    await start(
        f'sleep {marker} & sleep {marker} & bash -c \'trap "" TERM; '
        f"sleep {stubborn}; true' & wait",
        context,
    )
    deadline = time.monotonic() + 10
    while len(by_cmdline("sleep", marker)) < 2 or not by_cmdline("sleep", stubborn):
        assert time.monotonic() < deadline, "the children never started"
        await asyncio.sleep(0.05)
    job = table.get(1)
    assert len(group_members(job.pid)) >= 4  # bash, two sleeps, the trapping shell
    started = time.monotonic()
    await JobStop().run({"job_id": 1}, context)
    assert time.monotonic() - started < 6
    assert by_cmdline("sleep", marker) == [] and by_cmdline("sleep", stubborn) == []
    assert group_members(job.pid) == []


async def test_bad_calls_say_what_is_wrong(workspace: Path) -> None:
    table = JobTable(max_running=1)
    context = ctx(workspace, table)
    with pytest.raises(
        ToolError,
        match=r"there is no job 3; the jobs are: none \(bash with "
        r"background: true starts one\)",
    ):
        await JobOutput().run({"job_id": 3}, context)
    await start("sleep 30", context)
    with pytest.raises(
        ToolError,
        match="1 background jobs are running already \\(jobs 1\\); stop one with job_stop first",
    ):
        await start("sleep 30", context)
    with pytest.raises(ToolError, match="there is no job 2; the jobs are: 1"):
        await JobStop().run({"job_id": 2}, context)
    with pytest.raises(ToolError, match="wait_s must be a number of seconds"):
        await JobOutput().run({"job_id": 1, "wait_s": -1}, context)
    with pytest.raises(ToolError, match="background must be true or false"):
        await Bash().run({"command": "ls", "background": "yes"}, context)
    with pytest.raises(ToolError, match="background jobs are not available"):
        await Bash().run({"command": "ls", "background": True}, ToolContext(workspace=workspace))
    await table.aclose()
    with pytest.raises(ToolError, match="the session is ending"):
        await start("sleep 30", context)


def test_bash_offers_background_only_beside_the_job_tools() -> None:
    from sparkcode.agent.tools import default_tools

    full = default_tools()
    assert full.names[6:9] == ["bash", "job_output", "job_stop"]
    props = full.get("bash").spec()["function"]["parameters"]["properties"]  # type: ignore[union-attr]
    assert "background" in props
    small = default_tools(only=["read_file", "bash"])
    spec = small.specs()[1]["function"]["parameters"]["properties"]
    assert small.names == ["read_file", "bash"] and "background" not in spec


_CHILD = textwrap.dedent("""
    import asyncio, sys, time
    from pathlib import Path
    from sparkcode.agent.tools import Bash, JobTable, ToolContext

    async def main():
        table = JobTable()
        ctx = ToolContext(workspace=Path.cwd(), jobs=table)
        # A grandchild: asyncio kills a direct child whose transport it closes.
        await Bash().run({"command": "sleep %s & wait", "background": True}, ctx)
        print(table.get(1).pid, flush=True)
        if sys.argv[1] == "wait":
            await asyncio.sleep(60)

    asyncio.run(main())
""")


@pytest.mark.parametrize("how", ["exit", "sigterm", "sighup", "sigkill"])
def test_jobs_end_when_the_app_exits_or_is_signalled(workspace: Path, how: str) -> None:
    """Also when sparkcode is killed outright: nothing of it runs then, so the job's
    guard (its group leader) notices and ends the group."""
    marker = {"exit": "61.41", "sigterm": "61.42", "sighup": "61.43", "sigkill": "61.44"}[how]
    signals = {"sigterm": signal.SIGTERM, "sighup": signal.SIGHUP, "sigkill": signal.SIGKILL}
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD % marker, "exit" if how == "exit" else "wait"],
        cwd=workspace,
        stdout=subprocess.PIPE,
        text=True,
        # A hangup as a terminal sends it: under nohup (SIGHUP ignored, inherited) the
        # app rightly keeps ignoring it, and the child would sleep out its 60 s.
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
    )
    assert child.stdout is not None
    pgid = int(child.stdout.readline())
    if how != "exit":
        assert by_cmdline("sleep", marker) != []
        child.send_signal(signals[how])
    code = child.wait(timeout=30)
    assert code == (0 if how == "exit" else -signals[how])
    deadline = time.monotonic() + 10  # the guard polls every 0.2 s, then a 2 s grace
    while (by_cmdline("sleep", marker) or group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert by_cmdline("sleep", marker) == [] and group_members(pgid) == []


def test_claude_code_hook_matchers_name_the_job_tools() -> None:
    from sparkcode.hooks import HookSpec

    spec = HookSpec("PreToolUse", "true", matcher="BashOutput|KillShell")
    assert spec.matches("job_output") and spec.matches("job_stop")
    assert not spec.matches("bash")


async def test_a_process_left_behind_by_an_ended_job_is_still_stopped(workspace: Path) -> None:
    table = JobTable(grace_s=1.0)
    context = ctx(workspace, table)
    text = await start("sleep 61.44 & echo left", context)
    assert text.startswith("job 1 (exited with code 0 after ") and text.endswith("left")
    assert len(by_cmdline("sleep", "61.44")) == 1  # same group, holds the output open
    state = table.get(1).state()
    await asyncio.sleep(0.3)
    assert table.get(1).state() == state  # the end time is the command's own
    stopped = (await JobStop().run({"job_id": 1}, context)).text
    assert stopped.startswith(
        "(it had already ended; the processes it left running were "
        "stopped)\njob 1 (exited with code 0 after "
    )
    assert by_cmdline("sleep", "61.44") == []
    await table.aclose()


@pytest.mark.parametrize("offered", [True, False])
async def test_a_foreground_command_that_backgrounds_a_server_is_told_it_ended(
    workspace: Path, offered: bool
) -> None:
    """``server & ...`` in a foreground call: the server is ended with the call, and the
    result says so (with the way that works), instead of a bare exit code 0."""
    port = free_port()
    out = await Bash(background=offered).run(
        {"command": f"nohup {sys.executable} -m http.server {port} >/dev/null 2>&1 & sleep 0.2"},
        ToolContext(workspace=workspace.resolve()),
    )
    assert out.text.startswith("exit code 0")
    assert "did not outlive it" in out.text
    assert ("background: true" in out.text) is offered
    assert by_cmdline(sys.executable, "-m", "http.server", str(port)) == []
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/", timeout=2)


async def test_a_command_ending_in_ampersand_becomes_a_job_where_jobs_are_offered(
    workspace: Path,
) -> None:
    """What the 1.5B wrote when offered ``background``: ``server &``, then job_output
    for job 1. It is started as job 1, which answers; without the job tools it is not."""
    table = JobTable()
    port = free_port()
    out = await Bash().run(
        {"command": f"{sys.executable} -m http.server {port} &"}, ctx(workspace, table)
    )
    assert (
        out.text.startswith("(the command ends with `&`: it was started as a background job")
        and "started job 1" in out.text
    )
    await wait_for_port(port)
    assert httpx.get(f"http://127.0.0.1:{port}/", timeout=5).status_code == 200
    await table.aclose()
    assert by_cmdline(sys.executable, "-m", "http.server", str(port)) == []
    plain = await Bash(background=False).run({"command": "sleep 0.1 &"}, ctx(workspace, JobTable()))
    assert plain.text.startswith("exit code 0")


def test_only_a_lone_ampersand_backgrounds() -> None:
    from sparkcode.agent.tools._shell import backgrounds, ends_in_background

    assert ends_in_background("python -m http.server 8765 &")
    assert ends_in_background("nohup srv > log 2>&1 &")
    assert not ends_in_background("srv & sleep 1; curl x")
    assert not ends_in_background("a & b &")
    assert not ends_in_background("make && make test")

    assert backgrounds("python -m http.server &")
    assert backgrounds("server & sleep 1; curl x")
    assert not backgrounds("make && make test")
    assert not backgrounds("cmd >/dev/null 2>&1")
    assert not backgrounds("cmd &> log")
    assert not backgrounds("curl 'http://x/?a=1&b=2'")
    assert not backgrounds("echo 'unbalanced &")
