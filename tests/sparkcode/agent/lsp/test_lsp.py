"""Diagnostics after edits (sparkcode.agent.lsp): the real basedpyright behind the edit
tools on temp workspaces, the tests' own small server (``lsp_fake.py``) for a hang,
a crash and a configured language, and a headless run against the scripted server.

One basedpyright serves the module's shared tests (its start costs 2-12 s here), so
they share the module's event loop.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from engine.paths import Paths
from sparkcode.agent.lsp import (
    Diagnostics,
    LanguageServer,
    ServerGone,
    _hub,
    _rpc,
    confined,
    introduced,
    render,
)
from sparkcode.agent.tools import ToolContext, ToolOutput, default_tools, find_bwrap
from sparkcode.cli._run import EXIT_OK, RunRequest, run_headless
from sparkcode.config import (
    PYTHON_SERVER,
    ConfigError,
    DiagnosticsConfig,
    LanguageServerConfig,
    parse_config,
)
from sparkcode.start import SessionOptions
from tests.support.http_server import serve, url
from tests.support.scripted import Reply

shared_loop = pytest.mark.asyncio(loop_scope="module")
"""The module's event loop: the shared basedpyright's pipes belong to it."""

TOOLS = default_tools()
FAKE = [sys.executable, str(Path(__file__).with_name("lsp_fake.py"))]
CALC = "def double(x: int) -> int:\n    return x * 2\n\n\ntotal = double(2)\n"


async def tool(name: str, ws: Path, checker: Diagnostics | None, **args: Any) -> ToolOutput:
    found = TOOLS.get(name)
    assert found is not None
    return await found.run(args, ToolContext(workspace=ws, checker=checker))


@pytest.fixture(scope="module")
def patient() -> Iterator[None]:
    # A cold start took up to 12 s at load 10 here; the tests wait longer than an
    # edit would, so a busy CI machine makes them slower, not flaky.
    mp = pytest.MonkeyPatch()
    mp.setattr(_hub, "STARTUP_S", 90.0)
    yield
    mp.undo()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pyright(
    tmp_path_factory: pytest.TempPathFactory, patient: None
) -> AsyncIterator[tuple[Diagnostics, Path]]:
    ws = tmp_path_factory.mktemp("lsp-ws")
    hub = Diagnostics(DiagnosticsConfig(max_items=4, timeout_s=30.0), ws)
    out = await tool("write_file", ws, hub, path="warm.py", content="x = 1\n")
    assert out.notice is None and out.text == "created warm.py (1 lines)", out
    yield hub, ws
    server = hub._slots["python"].server
    await hub.aclose()
    assert server is not None and server.process.returncode is not None


@shared_loop
async def test_an_edit_that_introduces_a_type_error_returns_it(
    pyright: tuple[Diagnostics, Path],
) -> None:
    hub, ws = pyright
    (ws / "calc.py").write_text(CALC)
    out = await tool(
        "edit_file",
        ws,
        hub,
        path="calc.py",
        old_string="total = double(2)",
        new_string="total: str = double(2)",
    )
    head, block = out.text.split("\n\n")
    assert head == "edited calc.py" and out.notice is None
    lines = block.splitlines()
    assert lines[0] == "[basedpyright found 1 new problem in calc.py after this edit:]"
    assert lines[1].startswith(
        'calc.py:5:14: error: Type "int" is not assignable to declared type "str"'
    )
    assert lines[1].endswith("(reportAssignmentType)") and len(lines) == 2
    assert out.diff is not None and "+total: str = double(2)" in out.diff


@shared_loop
async def test_an_edit_that_fixes_an_error_returns_nothing_new(
    pyright: tuple[Diagnostics, Path],
) -> None:
    hub, ws = pyright
    (ws / "fix.py").write_text('count: int = "three"\n')
    out = await tool("edit_file", ws, hub, path="fix.py", old_string='"three"', new_string="3")
    assert out.text == "edited fix.py" and out.notice is None


@shared_loop
async def test_a_pre_existing_error_is_not_repeated(pyright: tuple[Diagnostics, Path]) -> None:
    hub, ws = pyright
    (ws / "old.py").write_text('import os\n\nname: int = "x"\n')
    # The known error moves two lines down: the same problem, not a new one.
    out = await tool(
        "edit_file",
        ws,
        hub,
        path="old.py",
        old_string="import os\n",
        new_string="import os\nimport sys\n\n",
    )
    assert out.text == "edited old.py"
    # A second copy of a different problem is new; the old one still is not.
    out = await tool(
        "multi_edit",
        ws,
        hub,
        path="old.py",
        edits=[{"old_string": "import sys\n", "new_string": "import sys\n\nsys.no_such_thing\n"}],
    )
    lines = out.text.split("\n\n", 1)[1].splitlines()
    assert len(lines) == 2 and "no_such_thing" in lines[1] and "old.py:4:" in lines[1]
    assert "name" not in lines[1]


@shared_loop
async def test_the_listing_is_capped_and_a_new_file_is_checked_whole(
    pyright: tuple[Diagnostics, Path],
) -> None:
    hub, ws = pyright
    body = "".join(f"v{n}: int = '{n}'\n" for n in range(7))
    out = await tool("write_file", ws, hub, path="pkg/many.py", content=body)
    lines = out.text.split("\n\n", 1)[1].splitlines()
    assert lines[0] == "[basedpyright found 7 new problems in pkg/many.py after this edit:]"
    assert [ln.split(":")[1] for ln in lines[1:5]] == ["1", "2", "3", "4"]
    assert lines[5:] == ["[and 3 more]"]


@shared_loop
async def test_the_setting_off_checks_nothing(tmp_path: Path) -> None:
    hub = Diagnostics(DiagnosticsConfig(enabled=False), tmp_path)
    (tmp_path / "a.py").write_text("x = 1\n")
    out = await tool(
        "edit_file", tmp_path, hub, path="a.py", old_string="x = 1", new_string='x: int = "a"'
    )
    assert out.text == "edited a.py" and out.notice is None
    assert hub._slots["python"].starting is None and hub._slots["python"].server is None
    config = parse_config("[diagnostics]\nenabled = false\n", Path("config.toml"))
    assert config.diagnostics.enabled is False


@shared_loop
async def test_a_missing_server_is_a_notice_once_and_edits_go_on(tmp_path: Path) -> None:
    missing = replace(PYTHON_SERVER, command="sparkcode-no-such-langserver")
    hub = Diagnostics(DiagnosticsConfig(servers=(missing,)), tmp_path)
    out = await tool("write_file", tmp_path, hub, path="a.py", content='x: int = "a"\n')
    assert out.text == "created a.py (1 lines)"
    assert (
        out.notice is not None and "'sparkcode-no-such-langserver' is not installed" in out.notice
    )
    out = await tool("write_file", tmp_path, hub, path="b.py", content='y: int = "b"\n')
    assert out.text == "created b.py (1 lines)" and out.notice is None
    assert (tmp_path / "b.py").read_text() == 'y: int = "b"\n'


@shared_loop
async def test_a_server_killed_mid_session_is_a_notice_and_is_started_again(
    tmp_path: Path, patient: None
) -> None:
    hub = Diagnostics(DiagnosticsConfig(timeout_s=30.0), tmp_path)
    try:
        out = await tool("write_file", tmp_path, hub, path="a.py", content="a: int = 1\n")
        assert out.notice is None, out
        server = hub._slots["python"].server
        assert server is not None
        os.killpg(server.process.pid, signal.SIGKILL)
        await asyncio.wait_for(server.process.wait(), 10)
        out = await tool(
            "edit_file",
            tmp_path,
            hub,
            path="a.py",
            old_string="a: int = 1",
            new_string='a: int = "one"',
        )
        assert out.text.startswith("edited a.py")
        assert (tmp_path / "a.py").read_text() == 'a: int = "one"\n'
        assert out.notice is not None and "was killed by signal 9" in out.notice
        assert "started again" in out.notice
        # The new server answered this very edit (its start had the startup allowance).
        assert "reportAssignmentType" in out.text
        assert hub._slots["python"].server is not server
    finally:
        await hub.aclose()


@shared_loop
async def test_a_bug_in_the_client_is_a_notice_and_the_edit_stands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*args: Any) -> None:
        raise ValueError("a bug")

    monkeypatch.setattr(LanguageServer, "start", broken)
    hub = Diagnostics(DiagnosticsConfig(), tmp_path)
    out = await tool("write_file", tmp_path, hub, path="a.py", content="x = 1\n")
    assert out.text == "created a.py (1 lines)" and (tmp_path / "a.py").is_file()
    assert out.notice == "diagnostics after edits failed: ValueError: a bug"
    await hub.aclose()


def fake(*flags: str, **settings: Any) -> LanguageServerConfig:
    return LanguageServerConfig(
        name="fake",
        command=FAKE[0],
        args=(FAKE[1], *flags),
        extensions=(".txt",),
        settings=settings,
    )


@shared_loop
async def test_a_configured_server_for_another_language(tmp_path: Path) -> None:
    # Without versions in publishDiagnostics (as some servers send them), with settings
    # answered to its workspace/configuration request.
    hub = Diagnostics(
        DiagnosticsConfig(servers=(PYTHON_SERVER, fake("--no-version", fake={"word": "WORSE"}))),
        tmp_path,
    )
    try:
        (tmp_path / "n.txt").write_text("ok\nBAD one\n")
        out = await tool(
            "edit_file", tmp_path, hub, path="n.txt", old_string="ok\n", new_string="BAD two\nok\n"
        )
        assert out.text.split("\n\n")[1].splitlines() == [
            "[fake found 1 new problem in n.txt after this edit:]",
            "n.txt:1:1: error: WORSE on this line (bad)",
        ]
    finally:
        await hub.aclose()


@shared_loop
async def test_a_hanging_server_costs_each_edit_its_timeout_then_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_hub, "STARTUP_S", 0.5)
    hub = Diagnostics(DiagnosticsConfig(servers=(fake("--hang"),), timeout_s=0.3), tmp_path)
    notices = []
    for n in range(4):
        out = await tool("write_file", tmp_path, hub, path=f"{n}.txt", content="BAD\n")
        assert out.text == f"created {n}.txt (1 lines)"
        notices.append(out.notice)
    assert notices[0] is not None and "did not start and report diagnostics in time" in notices[0]
    assert notices[1] is None
    assert notices[2] is not None and "it is stopped" in notices[2]
    assert notices[3] is None and hub._slots["fake"].off is not None
    await hub.aclose()


@shared_loop
async def test_a_server_that_crashes_is_restarted_then_left_off(tmp_path: Path) -> None:
    hub = Diagnostics(DiagnosticsConfig(servers=(fake("--exit-on-change"),)), tmp_path)
    (tmp_path / "c.txt").write_text("fine\n")
    notices = []
    for n in range(_hub.MAX_STARTS + 1):
        old, new = ("fine", "BAD") if n % 2 == 0 else ("BAD", "fine")
        out = await tool("edit_file", tmp_path, hub, path="c.txt", old_string=old, new_string=new)
        assert out.text == "edited c.txt"
        notices.append(out.notice)
    assert notices[0] is not None and "exited with code 3" in notices[0]
    assert "started again at the next edit" in notices[0]
    assert "no diagnostics for the rest of this session" in str(notices[_hub.MAX_STARTS - 1])
    assert notices[_hub.MAX_STARTS] is None
    await hub.aclose()


@pytest.mark.skipif(find_bwrap().path is None, reason="bubblewrap cannot run here")
def test_a_server_reads_the_workspace_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "seen.txt").write_text("visible\n")
    argv = confined(["sh", "-c", "cat seen.txt; touch made.txt; touch /tmp/x-$$"], tmp_path)
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert done.stdout == "visible\n"
    assert "Read-only file system" in done.stderr and done.returncode != 0
    assert not (tmp_path / "made.txt").exists()


@shared_loop
async def test_a_malformed_frame_ends_the_connection() -> None:
    reader = asyncio.StreamReader()
    reader.feed_data(_rpc.frame({"jsonrpc": "2.0", "method": "x"}))
    assert (await _rpc.read_frame(reader))["method"] == "x"
    for bad in (
        b"Content-Length: 5\r\n\r\n{nope",
        b"Content-Length: x\r\n\r\n",
        b"\r\n{}",
        b"Content-Length: 9\r\n\r\n{}",
    ):
        reader = asyncio.StreamReader()
        reader.feed_data(bad)
        reader.feed_eof()
        with pytest.raises(ServerGone):
            await _rpc.read_frame(reader)


def diag(line: int, message: str, severity: int = 1) -> dict[str, Any]:
    return {
        "range": {"start": {"line": line, "character": 0}},
        "message": message,
        "severity": severity,
        "source": "s",
        "code": "c",
    }


def test_new_means_more_copies_than_before_at_the_least_severity() -> None:
    before = [diag(1, "a"), diag(5, "b")]
    after = [diag(9, "b"), diag(3, "a"), diag(2, "a"), diag(0, "w", severity=2)]
    assert [d["range"]["start"]["line"] for d in introduced(before, after)] == [2]
    assert [d["message"] for d in introduced(before, after, "warning")] == ["w", "a"]


def test_the_listing_keeps_to_its_character_cap() -> None:
    new = [diag(n, "x" * 150) for n in range(10)]
    text = render(new, "f.py", "s", max_items=10, max_chars=500)
    assert len(text) <= 500 and text.endswith("[and 8 more]")
    long = render([diag(0, "y" * 5000)], "f.py", "s", max_items=10, max_chars=2000)
    assert len(long.splitlines()[1]) == 300 and long.splitlines()[1].endswith("...")


def test_bad_diagnostics_settings_are_named() -> None:
    for text, what in [
        ("[diagnostics]\ntimeout_s = 0\n", "timeout_s"),
        ('[diagnostics]\nseverity = "loud"\n', "severity: must be one of"),
        ("[diagnostics]\nmax_items = 0\n", "max_items"),
        ('[diagnostics.servers.rust]\ncommand = "rust-analyzer"\n', "extensions"),
        ('[diagnostics.servers.rust]\nextensions = [".rs"]\n', "command"),
        (
            '[diagnostics.servers.rust]\ncommand = "ra"\nextensions = [".rs"]\nport = 1\n',
            "unknown key 'port'",
        ),
    ]:
        with pytest.raises(ConfigError, match=what):
            parse_config(text, Path("config.toml"))
    config = parse_config(
        '[diagnostics.servers.rust]\ncommand = "rust-analyzer"\nextensions = [".rs"]\n',
        Path("config.toml"),
    )
    assert [s.name for s in config.diagnostics.servers] == ["python", "rust"]
    assert config.diagnostics.servers[1].language_id == "rust"


@shared_loop
async def test_a_headless_run_sends_the_new_error_to_the_model(
    workspace: Path, patient: None
) -> None:
    # Through the session builder (config.toml's [diagnostics], the default on) and
    # the loop: the model's next request carries the error in the tool message.
    config = Paths.from_env().config_file
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("[diagnostics]\ntimeout_s = 30\n")
    write = (
        "write_file",
        json.dumps({"path": "calc.py", "content": CALC.replace("total =", "total: str =")}),
    )
    with serve([Reply(tool_calls=[write]), Reply(content=["done"])]) as server:
        out, err = io.StringIO(), io.StringIO()
        code = await run_headless(
            RunRequest(
                prompt="write calc.py",
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
    finished = [e for e in events if e["type"] == "ToolCallFinished"][0]
    assert "reportAssignmentType" in finished["result"]
    tool_message = [m for m in server.requests[1]["messages"] if m["role"] == "tool"][0]
    assert tool_message["content"] == finished["result"]


@shared_loop
async def test_a_headless_run_tells_the_user_of_a_missing_server(workspace: Path) -> None:
    config = Paths.from_env().config_file
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        '[diagnostics.servers.python]\ncommand = "sparkcode-no-such-ls"\nextensions = [".py"]\n'
    )
    writes = [("write_file", json.dumps({"path": f"{n}.py", "content": "x = 1\n"})) for n in "ab"]
    with serve([Reply(tool_calls=writes), Reply(content=["done"])]) as server:
        out, err = io.StringIO(), io.StringIO()
        code = await run_headless(
            RunRequest(
                prompt="write",
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
    notices = [e for e in events if e["type"] == "Notice" and e["code"] == "diagnostics"]
    assert len(notices) == 1 and "not installed" in notices[0]["message"]
    assert [e["result"] for e in events if e["type"] == "ToolCallFinished"] == [
        "created a.py (1 lines)",
        "created b.py (1 lines)",
    ]
