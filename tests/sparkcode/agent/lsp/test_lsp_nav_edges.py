"""The navigation tools' edges without basedpyright: LSP positions and WorkspaceEdits
read exactly or refused, the multi-file edit path refusing before it writes, a hung or
dying server a prompt tool error, and which tools a session's list offers."""

from __future__ import annotations

import errno
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from engine.errors import UserError
from sparkcode.agent.lsp import Diagnostics, _hub, navigation_tools
from sparkcode.agent.lsp._positions import (
    applied,
    from_utf16,
    plain_symbol,
    symbol_index,
    text_edits,
    utf16_units,
    workspace_edits,
)
from sparkcode.agent.tools import (
    NAVIGATION_TOOLS,
    KeptFiles,
    ToolContext,
    ToolError,
    apply_changes,
    default_tools,
    plan_changes,
)
from sparkcode.config import PYTHON_SERVER, DiagnosticsConfig, LanguageServerConfig

FAKE = Path(__file__).with_name("lsp_fake.py")


def edit(line: int, start: int, end: int, new: str) -> dict[str, Any]:
    return {
        "range": {
            "start": {"line": line, "character": start},
            "end": {"line": line, "character": end},
        },
        "newText": new,
    }


def test_columns_count_utf16_units_as_servers_do() -> None:
    line = "s = '\U0001f600'; calc_total()"
    index = symbol_index(line, "calc_total")
    assert index == 9 and utf16_units(line, index) == 10  # the emoji is two units
    assert from_utf16(line, 10) == 9
    with pytest.raises(ValueError, match="past the end"):
        from_utf16("abc", 4)
    assert symbol_index("subtotal = total", "total") == 11  # a whole name only
    assert symbol_index("subtotal = 1", "total") is None
    assert [plain_symbol(s) for s in ("`calc_total()`", "shop.calc_total", " x ")] == [
        "calc_total",
        "calc_total",
        "x",
    ]


def test_edits_apply_in_place_and_overlaps_or_foreign_ranges_are_refused() -> None:
    text = "a = old\r\nprint(old)\n"
    edits = text_edits(text, (edit(1, 6, 9, "new"), edit(0, 4, 7, "new")))
    assert applied(text, edits) == "a = new\r\nprint(new)\n"  # line ends kept
    with pytest.raises(ValueError, match="overlap"):
        text_edits(text, (edit(0, 4, 7, "x"), edit(0, 5, 6, "y")))
    with pytest.raises(ValueError, match="line 5 is past the end"):
        text_edits(text, (edit(4, 0, 1, "x"),))
    with pytest.raises(ValueError, match="past the end of the line"):
        text_edits(text, (edit(0, 4, 40, "x"),))


def test_a_workspace_edit_is_read_in_both_shapes_and_file_operations_refused() -> None:
    a, b = Path("/w/a.py"), Path("/w/b c.py")
    changes = workspace_edits(
        {"changes": {a.as_uri(): [edit(0, 0, 1, "x")], b.as_uri(): [edit(1, 0, 1, "y")]}}
    )
    assert [(f.path, len(f.edits)) for f in changes] == [(a, 1), (b, 1)]
    documents = workspace_edits(
        {
            "documentChanges": [
                {"textDocument": {"uri": a.as_uri(), "version": 3}, "edits": [edit(0, 0, 1, "x")]}
            ]
        }
    )
    assert documents[0].version == 3
    with pytest.raises(ValueError, match="would also create a file"):
        workspace_edits({"documentChanges": [{"kind": "create", "uri": a.as_uri()}]})
    with pytest.raises(ValueError, match="is not a file"):
        workspace_edits({"changes": {"untitled:1": []}})


def test_the_edit_path_refuses_the_whole_change_before_writing(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("old = 1\n")
    (tmp_path / "b.py").write_text("print(old)\n")
    ctx = ToolContext(workspace=tmp_path.resolve())
    good = (tmp_path / "a.py", "old = 1\n", "new = 1\n")
    cases = [
        ((Path("/etc/hosts"), "", "x"), "outside the workspace"),
        (
            (tmp_path / "b.py", "print(old) # stale\n", "print(new)\n"),
            "b.py changed after the change was computed",
        ),
        ((tmp_path / ".git" / "config", "", "x"), "inside .git"),
    ]
    for bad, why in cases:
        with pytest.raises(ToolError, match=why) as caught:
            plan_changes(ctx, [good, bad])
        assert str(caught.value).endswith("No file was changed.")
    kept = replace(ctx, kept=KeptFiles(names=frozenset({"b.py"})))
    with pytest.raises(ToolError, match="b.py was not changed: the task says not to"):
        plan_changes(kept, [good, (tmp_path / "b.py", "print(old)\n", "print(new)\n")])
    assert (tmp_path / "a.py").read_text() == "old = 1\n"
    # The lost-definitions guard lets the rename's own name go.
    (tmp_path / "c.py").write_text("def old():\n    pass\n")
    guarded = replace(ctx, refuse_lost_definitions=True)
    renamed = (tmp_path / "c.py", "def old():\n    pass\n", "def new():\n    pass\n")
    with pytest.raises(ToolError, match="would delete old"):
        plan_changes(guarded, [renamed])
    assert [c.shown for c in plan_changes(guarded, [renamed], names="old")] == ["c.py"]


async def test_a_failed_write_puts_back_the_files_written_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.py").write_text("old = 1\n")
    (tmp_path / "b.py").write_text("old = 2\n")
    ctx = ToolContext(workspace=tmp_path.resolve())
    changes = plan_changes(
        ctx,
        [
            (tmp_path / "a.py", "old = 1\n", "new = 1\n"),
            (tmp_path / "b.py", "old = 2\n", "new = 2\n"),
        ],
    )
    write = Path.write_bytes

    def refusing(path: Path, data: bytes) -> int:
        if path.name == "b.py":
            raise OSError(errno.ENOSPC, "No space left on device")
        return write(path, data)

    monkeypatch.setattr(Path, "write_bytes", refusing)
    with pytest.raises(
        ToolError,
        match="cannot write b.py: No space left on device; the "
        "files written before it were put back",
    ):
        await apply_changes(ctx, changes, "renamed")
    assert (tmp_path / "a.py").read_text() == "old = 1\n"


def fake(*args: str) -> LanguageServerConfig:
    return LanguageServerConfig(
        name="fake", command=sys.executable, args=args, extensions=(".txt",)
    )


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        (fake(str(FAKE), "--hang"), "did not answer within 0.6 s"),
        (
            fake("-c", "import sys; sys.exit(5)"),
            r"did not start \(the server closed its output\); it is started again",
        ),
    ],
)
async def test_a_hung_or_dying_server_is_a_prompt_tool_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: LanguageServerConfig, why: str
) -> None:
    monkeypatch.setattr(_hub, "STARTUP_S", 0.3)
    monkeypatch.setattr(_hub, "NAVIGATION_S", 0.3)
    (tmp_path / "n.txt").write_text("word\n")
    hub = Diagnostics(DiagnosticsConfig(servers=(spec,)), tmp_path.resolve())
    [definition, *_] = navigation_tools(hub)
    started = time.monotonic()
    try:
        with pytest.raises(ToolError, match=why):
            await definition.run(
                {"path": "n.txt", "line": 1, "symbol": "word"},
                ToolContext(workspace=tmp_path.resolve()),
            )
    finally:
        await hub.aclose()
    assert time.monotonic() - started < 10


def test_the_tools_are_offered_where_a_server_is_and_the_list_names_them(tmp_path: Path) -> None:
    missing = replace(PYTHON_SERVER, command="sparkcode-no-such-langserver")
    assert navigation_tools(None) == []
    assert navigation_tools(Diagnostics(DiagnosticsConfig(enabled=False), tmp_path)) == []
    assert navigation_tools(Diagnostics(DiagnosticsConfig(servers=(missing,)), tmp_path)) == []
    tools = navigation_tools(Diagnostics(DiagnosticsConfig(), tmp_path))
    assert tuple(t.name for t in tools) == NAVIGATION_TOOLS
    assert tools[2].kind == "edit" and tools[0].kind == tools[1].kind == "read"
    assert tools[0].description.endswith("Works in .py, .pyi files.")
    assert default_tools(only=["read_file", "rename"], navigation=tools).names == [
        "read_file",
        "rename",
    ]
    assert "rename" not in default_tools(only=["read_file"], navigation=tools).names
    assert default_tools(only=["rename"]).names == []  # listed, but no server here
    with pytest.raises(UserError, match="built-in tools are: .*definition, references, rename"):
        default_tools(only=["renam"], navigation=tools)
