"""edit_file's drift tolerance and multi_edit, on real files in a temp workspace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.corpora.edit_drift import DRIFTS, build, evaluate
from sparkcode.agent.tools import ToolContext, ToolError, ToolOutput, default_tools

TOOLS = default_tools()

CODE = "def f(x):\n    if x:\n        return 1\n    return 0\n\n\ndef g():\n    pass\n"


async def edit(ws: Path, name: str = "edit_file", **args: Any) -> ToolOutput:
    tool = TOOLS.get(name)
    assert tool is not None
    return await tool.run({"path": "m.py", **args}, ToolContext(workspace=ws))


@pytest.mark.parametrize(
    ("old", "new", "how"),
    [
        # trailing whitespace on the copy
        (
            "    if x:  \n        return 1 \n",
            "    if x:\n        return 2\n",
            "trailing whitespace",
        ),
        # the block copied flush-left, the replacement written the same way
        ("if x:\n    return 1\n", "if x:\n    return 2\n", "indentation"),
        # four spaces deeper than the file, with a line added one level in
        (
            "        if x:\n            return 1\n",
            "        if x:\n            y = 1\n            return 2\n",
            "indentation",
        ),
        # tabs in the copy, spaces in the file
        ("\tif x:\n\t\treturn 1\n", "\tif x:\n\t\treturn 2\n", "indentation"),
        # CRLF in the copy
        ("    if x:\r\n        return 1\r\n", "    if x:\r\n        return 2\r\n", "line endings"),
    ],
)
async def test_drifted_copies_edit_the_one_place_they_match(
    workspace: Path, old: str, new: str, how: str
) -> None:
    (workspace / "m.py").write_text(CODE)
    out = await edit(workspace, old_string=old, new_string=new)
    assert out.text == f"edited m.py (matched ignoring {how})"
    want = CODE.replace("return 1", "y = 1\n        return 2" if "y = 1" in new else "return 2")
    assert (workspace / "m.py").read_text() == want


async def test_a_tab_indented_file_keeps_its_tabs_and_crlf_file_its_line_ends(
    workspace: Path,
) -> None:
    (workspace / "m.py").write_bytes(b"def f(x):\r\n\tif x:\r\n\t\treturn 1\r\n")
    await edit(
        workspace,
        old_string="    if x:\n        return 1\n",
        new_string="    if x:\n        log(x)\n            nested()\n        return 1\n",
    )
    assert (
        workspace / "m.py"
    ).read_bytes() == b"def f(x):\r\n\tif x:\r\n\t\tlog(x)\r\n\t\t\tnested()\r\n\t\treturn 1\r\n"


async def test_an_exact_match_always_wins(workspace: Path) -> None:
    (workspace / "m.py").write_text("a = 1  \na = 1\n")
    out = await edit(workspace, old_string="a = 1  \n", new_string="b = 2\n")
    assert out.text == "edited m.py"
    assert (workspace / "m.py").read_text() == "b = 2\na = 1\n"


async def test_a_tolerant_match_must_be_unique(workspace: Path) -> None:
    text = "def a():\n    x = 1\n    return x\n\ndef b():\n        x = 1\n        return x\n"
    (workspace / "m.py").write_text(text)
    with pytest.raises(
        ToolError,
        match=r"ignoring indentation .* matches 2 places "
        r"\(lines 2, 6\)",
    ):
        await edit(workspace, old_string="x = 1\nreturn x\n", new_string="x = 2\nreturn x\n")
    assert (workspace / "m.py").read_text() == text


async def test_a_copy_whose_indentation_does_not_fit_is_refused(workspace: Path) -> None:
    (workspace / "m.py").write_text(CODE)
    # "if x:" and "return 1" at the same depth: the same copy indent stands for two
    # file depths, so where new lines go is unknowable.
    with pytest.raises(ToolError, match="does not correspond to the file's line by line"):
        await edit(workspace, old_string="if x:\nreturn 1\n", new_string="if x:\nreturn 2\n")
    # A flush-left copy of one line with added lines at or past its depth.
    with pytest.raises(ToolError, match="matches line 3 without its indentation"):
        await edit(workspace, old_string="return 1", new_string="return 1\n        y = 2")
    assert (workspace / "m.py").read_text() == CODE


async def test_a_miss_shows_the_nearest_region_with_line_numbers(workspace: Path) -> None:
    (workspace / "m.py").write_text(CODE)
    with pytest.raises(ToolError) as info:
        await edit(workspace, old_string="def g():\n    return None\n", new_string="x")
    message = str(info.value)
    assert "not found in m.py, not even ignoring line endings" in message
    assert "nearest region is lines 4-8" in message
    assert "     7\tdef g():\n     8\t    pass" in message
    with pytest.raises(ToolError, match="Nothing in the file resembles it"):
        await edit(workspace, old_string="zzzz qqqq", new_string="x")


async def test_an_empty_old_string_is_told_the_lines_to_copy(workspace: Path) -> None:
    """The 1.5B sent old_string "" to add a function (2026-12-04, docs/agent.md)."""
    (workspace / "m.py").write_text(CODE)
    with pytest.raises(ToolError) as refused:
        await edit(workspace, old_string="", new_string="def h():\n    pass\n")
    assert str(refused.value) == (
        "old_string is empty. To add code at the end of m.py, copy its last lines as "
        "old_string and send them followed by the new code as new_string; they are:\n"
        "def g():\n    pass\n(To create or replace a whole file, use write_file.)"
    )
    # the lines as quoted are the file's own: copied, they match
    out = await edit(
        workspace,
        old_string="def g():\n    pass",
        new_string="def g():\n    pass\n\n\ndef h():\n    pass",
    )
    assert out.text.startswith("edited m.py")
    (workspace / "m.py").write_text("\n\n")
    with pytest.raises(ToolError, match="m.py has no text to match; to create or fill"):
        await edit(workspace, old_string="", new_string="x = 1\n")


async def test_multi_edit_applies_all_or_nothing(workspace: Path) -> None:
    (workspace / "m.py").write_text(CODE)
    edits = [
        {"old_string": "return 1", "new_string": "return 10"},
        {"old_string": "  pass\n", "new_string": "  return 3\n"},
    ]
    out = await edit(workspace, "multi_edit", edits=edits)
    assert out.text == "edited m.py (2 edits)"
    assert (workspace / "m.py").read_text() == CODE.replace("return 1", "return 10").replace(
        "pass", "return 3"
    )
    (workspace / "m.py").write_text(CODE)
    bad = [
        edits[0],
        {"old_string": "return 10", "new_string": "return 11"},
        {"old_string": "nowhere at all", "new_string": "x"},
    ]
    with pytest.raises(ToolError, match=r"edit 3 of 3 failed, so none was applied"):
        await edit(workspace, "multi_edit", edits=bad)
    assert (workspace / "m.py").read_text() == CODE  # edits 1 and 2 were not written
    with pytest.raises(ToolError, match="edit 1 of 1 must be an object"):
        await edit(workspace, "multi_edit", edits=["return 1"])
    with pytest.raises(ToolError, match="non-empty list"):
        await edit(workspace, "multi_edit", edits=[])


async def test_drift_corpus_sample_applies_correctly_and_never_wrongly() -> None:
    """A slice of bench/corpora/edit_drift.py's corpus (the bench runs 900)."""
    cases = build(len(DRIFTS) * 20, seed=7)
    results = await evaluate(cases)
    assert sum(r.wrong for r in results.values()) == 0, results
    assert results["content"].refused == 20  # wrong copies are never applied
    applied = sum(r.correct for k, r in results.items() if k != "content")
    assert applied >= 0.95 * (len(cases) - 20), results


async def test_read_files_framing_is_never_written_into_a_file(workspace: Path) -> None:
    """What the 1.5B wrote in the agent suite (fix-line-even): read_file's header and
    numbers kept in a whole-file write, a broken file found only when tests ran."""
    parity = "def is_even(n):\n    return n % 2 == 1\n"
    (workspace / "m.py").write_text(parity)
    read = await TOOLS.get("read_file").run(  # type: ignore[union-attr]
        {"path": "m.py"}, ToolContext(workspace=workspace)
    )
    assert read.text.splitlines()[0] == "m.py (lines 1-2 of 2)"
    fixed = read.text.replace("== 1", "== 0")
    with pytest.raises(
        ToolError,
        match=r"m.py was not written: the content begins with "
        r"read_file's header line \('m.py \(lines 1-2 of 2\)'\)",
    ):
        await edit(workspace, "write_file", content=fixed)
    body = fixed.split("\n", 1)[1]
    with pytest.raises(
        ToolError,
        match="m.py was not written: 2 of its 2 lines begin with read_file's line numbers",
    ):
        await edit(workspace, "write_file", content=body)
    with pytest.raises(ToolError, match="m.py was not changed: new_string: 2 of its 2 lines"):
        await edit(workspace, old_string=parity, new_string=body)
    assert (workspace / "m.py").read_text() == parity  # nothing written
    # A file whose own lines look like that (a TSV of numbers) is written as asked.
    (workspace / "m.py").write_text("1\tone\n2\ttwo\n")
    out = await edit(workspace, "write_file", content="1\tone\n2\ttwo\n3\tthree\n")
    assert out.text == "overwrote m.py (3 lines)"


async def test_a_guessed_directory_for_a_file_at_the_top_is_refused(workspace: Path) -> None:
    """The 1.5B wrote its (right) fix of calc.py to workspace/calc.py (agent suite,
    fix-line-add), and the task failed."""
    (workspace / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    for guess in ("workspace/calc.py", "src/main/python/calc.py"):
        with pytest.raises(
            ToolError,
            match=rf"{guess} was not written: there is no "
            rf"{guess.split('/')[0]}/ directory, and calc.py is already at "
            r"the top of the project\..*use 'calc.py'",
        ):
            await edit(workspace, "write_file", path=guess, content="x = 1\n")
    assert sorted(p.name for p in workspace.iterdir()) == ["calc.py"]
    # Meant: the directory exists, or the name is new, or the file is at the top.
    (workspace / "tests").mkdir()
    for path in ("tests/calc.py", "src/util.py", "calc.py"):
        out = await edit(workspace, "write_file", path=path, content="x = 1\n")
        assert out.text.endswith(f"{path} (1 lines)")


async def test_reading_or_editing_a_guessed_directory_works_on_the_file_at_the_top(
    workspace: Path,
) -> None:
    """The 1.5B read and edited src/inventory.py for inventory.py (fix-test-stock) and
    spent the try on "does not exist"; a project that has the directory is not
    second-guessed."""
    (workspace / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    read = await edit(workspace, "read_file", path="src/calc.py")
    assert read.text.startswith(
        "calc.py (lines 1-2 of 2; there is no src/ directory, so "
        "this is calc.py at the top of the project)\n"
    )
    out = await edit(workspace, path="workspace/calc.py", old_string="a - b", new_string="a + b")
    assert out.text == (
        "edited calc.py (there is no workspace/ directory, so this is "
        "calc.py at the top of the project)"
    )
    assert out.diff is not None and out.diff.startswith("--- a/calc.py\n+++ b/calc.py\n")
    assert (workspace / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    (workspace / "src").mkdir()
    with pytest.raises(ToolError, match="src/calc.py does not exist; src holds no files"):
        await edit(workspace, "read_file", path="src/calc.py")
    with pytest.raises(
        ToolError, match="lib/other.py does not exist; the files in the project are: calc.py"
    ):
        await edit(workspace, "read_file", path="lib/other.py")


async def test_reading_or_editing_a_directory_lists_its_files(workspace: Path) -> None:
    """The error names the files to read, not a list_files tool that cpu-coder's
    profile does not offer (its first call in a tmux run read ``.``)."""
    (workspace / "calc.py").write_text("x = 1\n")
    (workspace / "pkg").mkdir()
    (workspace / "pkg" / "util.py").write_text("y = 2\n")
    for path, listing in (
        (".", "the files in the project are: calc.py, pkg/util.py"),
        ("pkg", "the files in pkg are: pkg/util.py"),
    ):
        with pytest.raises(ToolError) as read:
            await edit(workspace, "read_file", path=path)
        assert str(read.value) == f"{path} is a directory; {listing}; read one of them by its path"
    with pytest.raises(ToolError, match="^pkg is a directory; the files in pkg are: pkg/util.py"):
        await edit(workspace, path="pkg", old_string="y", new_string="z")
    (workspace / "empty").mkdir()
    with pytest.raises(ToolError, match="^empty is a directory; empty holds no files$"):
        await edit(workspace, "read_file", path="empty")
