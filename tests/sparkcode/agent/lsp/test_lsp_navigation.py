"""The navigation tools (``definition``, ``references``, ``rename``) against the real
basedpyright the diagnostics tests use: a small project whose function is used in two
other files, the agent loop driving ``rename`` from a scripted server (approval, undo),
and the session builder offering the tools only where a server can answer.

One basedpyright serves the read-only tests (its start costs 2-12 s here), so they
share the module's event loop; the rename tests start their own on their own copy.
"""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from engine.paths import Paths
from sparkcode.agent import Agent, AgentSettings, ChatClient, Permissions
from sparkcode.agent.core.events import ApprovalRequested, ToolCallFinished, UndoApplied
from sparkcode.agent.core.undo import UndoStore
from sparkcode.agent.lsp import Diagnostics, _hub, navigation_tools
from sparkcode.agent.tools import KeptFiles, ToolContext, ToolError, ToolOutput, default_tools
from sparkcode.cli._run import EXIT_OK, RunRequest, run_headless
from sparkcode.config import Config, DiagnosticsConfig
from sparkcode.start import SessionOptions
from tests.support.http_server import serve, url
from tests.support.scripted import Reply, ScriptedServer

shared_loop = pytest.mark.asyncio(loop_scope="module")
"""The module's event loop: the shared basedpyright's pipes belong to it."""

PROJECT = {
    "shop.py": "def calc_total(prices: list[float]) -> float:\n    return sum(prices)\n",
    "main.py": "from shop import calc_total\n\nprint(calc_total([1.0, 2.5]))\n",
    "report.py": (
        'import shop\n\n\ndef report() -> str:\n    return f"total: {shop.calc_total([3.0])}"\n'
    ),
}
RENAMED = {name: text.replace("calc_total", "total_price") for name, text in PROJECT.items()}


def project(ws: Path) -> Path:
    for name, text in PROJECT.items():
        (ws / name).write_text(text)
    return ws


def texts(ws: Path) -> dict[str, str]:
    return {name: (ws / name).read_text() for name in PROJECT}


async def nav(hub: Diagnostics, ws: Path, name: str, **args: Any) -> ToolOutput:
    found = default_tools(navigation=navigation_tools(hub)).get(name)
    assert found is not None
    return await found.run(args, ToolContext(workspace=ws, checker=hub))


@pytest.fixture(scope="module")
def patient() -> Iterator[None]:
    # A cold start took up to 12 s at load 10 here: the tests wait longer than a call
    # would, so a busy machine makes them slower, not flaky.
    mp = pytest.MonkeyPatch()
    mp.setattr(_hub, "STARTUP_S", 90.0)
    mp.setattr(_hub, "NAVIGATION_S", 60.0)
    yield
    mp.undo()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pyright(
    tmp_path_factory: pytest.TempPathFactory, patient: None
) -> AsyncIterator[tuple[Diagnostics, Path]]:
    ws = project(tmp_path_factory.mktemp("nav-ws").resolve())
    hub = Diagnostics(DiagnosticsConfig(timeout_s=30.0), ws)
    yield hub, ws
    await hub.aclose()


@shared_loop
async def test_definition_finds_the_function_in_the_other_file(
    pyright: tuple[Diagnostics, Path],
) -> None:
    hub, ws = pyright
    out = await nav(hub, ws, "definition", path="main.py", line=3, symbol="calc_total")
    assert out.text == (
        "calc_total (main.py line 3) is defined at:\n"
        "shop.py:1:5: def calc_total(prices: list[float]) -> float:"
    )
    # The model's usual slips in the name are read as the name.
    again = await nav(hub, ws, "definition", path="report.py", line=5, symbol="shop.calc_total()")
    assert again.text.splitlines()[1:] == [
        "shop.py:1:5: def calc_total(prices: list[float]) -> float:"
    ]


@shared_loop
async def test_references_list_the_uses_in_both_files(pyright: tuple[Diagnostics, Path]) -> None:
    hub, ws = pyright
    out = await nav(hub, ws, "references", path="shop.py", line=1, symbol="calc_total")
    assert out.text.splitlines() == [
        "calc_total (shop.py line 1): 4 places in 3 files:",
        "main.py:1:18: from shop import calc_total",
        "main.py:3:7: print(calc_total([1.0, 2.5]))",
        'report.py:5:27: return f"total: {shop.calc_total([3.0])}"',
        "shop.py:1:5: def calc_total(prices: list[float]) -> float:",
    ]


@shared_loop
async def test_a_file_written_after_the_server_started_is_seen(
    pyright: tuple[Diagnostics, Path],
) -> None:
    # basedpyright does not see a file written after its start by itself.
    hub, ws = pyright
    await nav(hub, ws, "references", path="shop.py", line=1, symbol="calc_total")
    (ws / "late.py").write_text("from shop import calc_total\n\nlate = calc_total([])\n")
    try:
        out = await nav(hub, ws, "references", path="main.py", line=1, symbol="calc_total")
        assert "late.py:3:8: late = calc_total([])" in out.text.splitlines()
        assert out.text.startswith("calc_total (main.py line 1): 6 places in 4 files:")
    finally:
        (ws / "late.py").unlink()
    out = await nav(hub, ws, "references", path="main.py", line=1, symbol="calc_total")
    assert "late.py" not in out.text


@shared_loop
async def test_a_line_without_the_name_is_taken_as_a_guess_and_said(
    pyright: tuple[Diagnostics, Path],
) -> None:
    # The 1.5B gave line numbers it had not read (0 of 9 renames when that was an error).
    hub, ws = pyright
    out = await nav(hub, ws, "definition", path="main.py", line=2, symbol="calc_total")
    assert out.text.splitlines()[:2] == [
        "calc_total (main.py line 1, not line 2, which does not have it) is defined at:",
        "shop.py:1:5: def calc_total(prices: list[float]) -> float:",
    ]
    out = await nav(hub, ws, "references", path="main.py", line=9, symbol="calc_total")
    assert out.text.startswith("calc_total (main.py line 3, not line 9, which does not have it): ")
    # No line: the name's definition in the file, else its first use.
    out = await nav(hub, ws, "references", path="shop.py", symbol="calc_total")
    assert out.text.startswith("calc_total (shop.py line 1): ")
    out = await nav(hub, ws, "definition", path="report.py", symbol="shop.calc_total()")
    assert out.text.splitlines()[0] == "calc_total (report.py line 5) is defined at:"
    with pytest.raises(ToolError) as caught:
        await nav(hub, ws, "definition", path="main.py", line=2, symbol="calc_totl")
    assert str(caught.value) == (
        "'calc_totl' is not on line 2 of main.py (line 2 is: ''), "
        "nor anywhere else in main.py; give a file where it appears"
    )
    with pytest.raises(ToolError, match="^'calc_totl' is not in main.py; give a file"):
        await nav(hub, ws, "definition", path="main.py", symbol="calc_totl")
    with pytest.raises(ToolError, match="no language server is configured for notes.txt"):
        (ws / "notes.txt").write_text("calc_total\n")
        await nav(hub, ws, "references", path="notes.txt", line=1, symbol="calc_total")


@shared_loop
async def test_a_rename_of_an_unknown_symbol_errors_and_changes_nothing(
    pyright: tuple[Diagnostics, Path],
) -> None:
    hub, ws = pyright
    (ws / "odd.py").write_text("print(undefined_thing)\n")
    try:
        with pytest.raises(ToolError) as caught:
            await nav(
                hub,
                ws,
                "rename",
                path="odd.py",
                line=1,
                symbol="undefined_thing",
                new_name="defined_thing",
            )
        assert (
            "cannot rename undefined_thing: basedpyright-langserver has nothing to "
            "rename there" in str(caught.value)
        )
        assert str(caught.value).endswith("no file was changed")
        with pytest.raises(ToolError, match="'calc_totl' is not on line 3 of main.py"):
            await nav(
                hub,
                ws,
                "rename",
                path="main.py",
                line=3,
                symbol="calc_totl",
                new_name="total_price",
            )
        with pytest.raises(ToolError, match="'total price' is not a Python name"):
            await nav(
                hub,
                ws,
                "rename",
                path="main.py",
                line=3,
                symbol="calc_total",
                new_name="total price",
            )
        assert texts(ws) == PROJECT and (ws / "odd.py").read_text() == "print(undefined_thing)\n"
    finally:
        (ws / "odd.py").unlink()


def call(name: str, **args: object) -> tuple[str, str]:
    return name, json.dumps(args)


@shared_loop
async def test_the_agent_renames_in_every_file_asks_first_and_undoes_it(
    tmp_path: Path, patient: None
) -> None:
    (tmp_path / "ws").mkdir()
    ws = project((tmp_path / "ws").resolve())
    server = ScriptedServer(
        [
            Reply(
                tool_calls=[
                    call(
                        "rename",
                        path="main.py",
                        line=3,
                        symbol="calc_total",
                        new_name="total_price",
                    )
                ]
            ),
            Reply(content=["renamed it"]),
        ]
    )
    hub = Diagnostics(DiagnosticsConfig(timeout_s=30.0), ws)
    agent = Agent(
        ChatClient("http://engine.test/v1", "m", transport=server.transport()),
        ws,
        settings=AgentSettings(),
        permissions=Permissions(Config(), mode="ask"),
        tools=default_tools(navigation=navigation_tools(hub)),
        undo=UndoStore(ws, tmp_path / "data"),
        checker=hub,
    )
    asked: list[ApprovalRequested] = []
    finished: list[ToolCallFinished] = []
    try:
        async for event in agent.run_turn("rename calc_total to total_price"):
            if isinstance(event, ApprovalRequested):
                assert texts(ws) == PROJECT  # nothing is written before the approval
                asked.append(event)
                event.respond(True)
            if isinstance(event, ToolCallFinished):
                finished.append(event)
    finally:
        await hub.aclose()
    offered = [t["function"]["name"] for t in server.requests[0]["tools"]]
    assert offered[-3:] == ["definition", "references", "rename"]
    assert [(a.tool, a.kind) for a in asked] == [("rename", "edit")], finished
    assert asked[0].summary == "rename calc_total to total_price in main.py, report.py, shop.py"
    assert "+from shop import total_price" in asked[0].detail
    assert "+def total_price(prices: list[float]) -> float:" in asked[0].detail
    assert texts(ws) == RENAMED
    [done] = finished
    assert done.error is None and done.result == (
        "renamed calc_total to total_price: 4 places in 3 files (main.py, report.py, shop.py)"
    )  # no name left behind, no new problem from basedpyright
    assert done.diff is not None and done.diff.count("+++ b/") == 3
    tool_message = [m for m in server.requests[1]["messages"] if m["role"] == "tool"][0]
    assert tool_message["content"] == done.result

    undone = agent.undo()
    assert isinstance(undone, UndoApplied)
    assert sorted(undone.changed) == ["main.py", "report.py", "shop.py"]
    assert texts(ws) == PROJECT


@shared_loop
async def test_a_rename_that_an_edit_guard_refuses_changes_no_file(
    tmp_path: Path, patient: None
) -> None:
    # The edit path's guards hold for every file of a rename: a file the turn's
    # message keeps refuses the whole rename.
    ws = project(tmp_path.resolve())
    hub = Diagnostics(DiagnosticsConfig(timeout_s=30.0), ws)
    tool = default_tools(navigation=navigation_tools(hub)).get("rename")
    assert tool is not None
    ctx = ToolContext(workspace=ws, checker=hub, kept=KeptFiles(names=frozenset({"report.py"})))
    try:
        with pytest.raises(ToolError) as caught:
            await tool.run(
                {"path": "shop.py", "line": 1, "symbol": "calc_total", "new_name": "total_price"},
                ctx,
            )
    finally:
        await hub.aclose()
    assert str(caught.value) == (
        "report.py was not changed: the task says not to change "
        "report.py; leave it as it is. No file was changed."
    )
    assert texts(ws) == PROJECT


@pytest.mark.parametrize(
    ("config", "offered"),
    [
        ("[diagnostics]\ntimeout_s = 30\n", True),
        ("[diagnostics]\nenabled = false\n", False),
        (
            '[diagnostics.servers.python]\ncommand = "sparkcode-no-such-ls"\n'
            'extensions = [".py"]\n',
            False,
        ),
        ('[agent]\ntools = ["read_file", "edit_file", "rename"]\n', True),
        ('[agent]\ntools = ["read_file", "edit_file"]\n', False),
    ],
)
async def test_the_session_offers_the_tools_only_where_a_server_can_answer(
    workspace: Path, config: str, offered: bool
) -> None:
    path = Paths.from_env().config_file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(config)
    with serve([Reply(content=["done"])]) as server:
        out, err = io.StringIO(), io.StringIO()
        code = await run_headless(
            RunRequest(
                prompt="hello",
                workspace=workspace,
                as_json=True,
                endpoint=url(server),
                session=SessionOptions(permission_mode="full-auto", record=False),
            ),
            out=out,
            err=err,
        )
    assert code == EXIT_OK, err.getvalue()
    names = [t["function"]["name"] for t in server.requests[0]["tools"]]
    assert ("rename" in names) is offered
    assert ("references" in names) is (offered and "tools" not in config)
    assert "read_file" in names


@shared_loop
async def test_a_headless_run_renames_through_the_sessions_own_hub(
    workspace: Path, patient: None
) -> None:
    # The builder's hub is both the edits' checker and the tools' server.
    project(workspace)
    path = Paths.from_env().config_file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("[diagnostics]\ntimeout_s = 30\n")
    rename = call("rename", path="report.py", line=5, symbol="calc_total", new_name="total_price")
    with serve([Reply(tool_calls=[rename]), Reply(content=["done"])]) as server:
        out, err = io.StringIO(), io.StringIO()
        code = await run_headless(
            RunRequest(
                prompt="rename calc_total to total_price",
                workspace=workspace,
                as_json=True,
                endpoint=url(server),
                session=SessionOptions(permission_mode="auto-edit", record=False),
            ),
            out=out,
            err=err,
        )
    assert code == EXIT_OK, err.getvalue()
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    [finished] = [e for e in events if e["type"] == "ToolCallFinished"]
    assert finished["result"].startswith(
        "renamed calc_total to total_price: 4 places in 3 files"
    ), finished
    assert texts(workspace) == RENAMED
    tool_message = [m for m in server.requests[1]["messages"] if m["role"] == "tool"][0]
    assert tool_message["content"] == finished["result"]
