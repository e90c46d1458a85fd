"""Tools on real temp directories and real git repositories."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import git
import psutil
import pytest

from sparkcode.agent.tools import (
    ToolContext,
    ToolError,
    ToolOutput,
    default_tools,
    is_read_only_command,
)

TOOLS = default_tools()


async def call(ws: Path, name: str, **args: Any) -> ToolOutput:
    tool = TOOLS.get(name)
    assert tool is not None
    return await tool.run(args, ToolContext(workspace=ws, bash_timeout_s=10, output_cap=2000))


async def test_a_missing_file_error_names_the_files_that_exist(workspace: Path) -> None:
    # A guessed path (src/hello.py; src/greet.py for greet.py is read as greet.py,
    # test_edits.py) is answered with what is there, not
    # with a tool the profile may not offer (cpu-coder has no list_files).
    (workspace / "greet.py").write_text("def greet(n):\n    return n\n")
    (workspace / "tests").mkdir()
    (workspace / "tests" / "test_greet.py").write_text("")
    for name in ("read_file", "edit_file"):
        with pytest.raises(ToolError) as err:
            await call(workspace, name, path="src/main/hello.py", old_string="a", new_string="b")
        assert str(err.value) == (
            "src/main/hello.py does not exist; the files in the "
            "project are: greet.py, tests/test_greet.py"
        )
    with pytest.raises(ToolError, match=r"in tests are: tests/test_greet\.py$"):
        await call(workspace, "read_file", path="tests/test_greet2.py")
    for i in range(25):
        (workspace / f"m{i:02}.py").write_text("")
    with pytest.raises(ToolError, match=r"m18\.py, \.\.\.$"):
        await call(workspace, "read_file", path="nope.py")


async def test_an_ambiguous_edit_shows_each_place_with_the_line_before(workspace: Path) -> None:
    # fix-line-even: told only "lines 2, 6 ... or set replace_all", Qwen-1.5B set
    # replace_all and broke is_odd; the lines before tell is_even's from is_odd's.
    (workspace / "parity.py").write_text(
        "def is_even(n):\n    return n % 2 == 1\n\n\ndef is_odd(n):\n    return n % 2 == 1\n"
    )
    with pytest.raises(ToolError) as err:
        await call(
            workspace,
            "edit_file",
            path="parity.py",
            old_string="n % 2 == 1",
            new_string="n % 2 == 0",
        )
    assert str(err.value).endswith(
        "Each place with the line before it:\n"
        "     1\tdef is_even(n):\n     2\t    return n % 2 == 1\n---\n"
        "     5\tdef is_odd(n):\n     6\t    return n % 2 == 1"
    )
    assert (workspace / "parity.py").read_text().count("== 1") == 2


async def test_read_file_with_line_ranges(workspace: Path) -> None:
    (workspace / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    out = await call(workspace, "read_file", path="f.txt", start_line=3, end_line=4)
    assert out.text.splitlines() == ["f.txt (lines 3-4 of 10)", "     3\tline 3", "     4\tline 4"]
    for start, end in ((11, 20), (-1, 3), (5, 2)):  # outside the file: all 10 lines
        out = await call(workspace, "read_file", path="f.txt", start_line=start, end_line=end)
        assert out.text.splitlines()[0] == (
            f"f.txt (lines 1-10 of 10; lines {start}-{end} do "
            "not exist, so the whole file is shown)"
        )
        assert out.text.splitlines()[-1] == "    10\tline 10"
    (workspace / "long.txt").write_text("x\n" * 201)
    with pytest.raises(ToolError, match=r"only 201 lines; bad line range 300\.\.301"):
        await call(workspace, "read_file", path="long.txt", start_line=300, end_line=301)
    with pytest.raises(ToolError, match="does not exist"):
        await call(workspace, "read_file", path="missing.txt")
    (workspace / "bin").write_bytes(b"\x00\x01\x02")
    with pytest.raises(ToolError, match="binary"):
        await call(workspace, "read_file", path="bin")


async def test_write_and_edit_files(workspace: Path) -> None:
    out = await call(workspace, "write_file", path="pkg/mod.py", content="a = 1\nb = 2\n")
    assert out.text == "created pkg/mod.py (2 lines)" and "+a = 1" in (out.diff or "")
    out = await call(
        workspace, "edit_file", path="pkg/mod.py", old_string="b = 2", new_string="b = 3"
    )
    assert (workspace / "pkg/mod.py").read_text() == "a = 1\nb = 3\n"
    assert "-b = 2" in (out.diff or "") and "+b = 3" in (out.diff or "")
    (workspace / "dup.py").write_text("x = 1\ny = 0\nx = 1\n")
    with pytest.raises(ToolError, match=r"occurs 2 times .*lines 1, 3"):
        await call(workspace, "edit_file", path="dup.py", old_string="x = 1", new_string="x")
    await call(
        workspace, "edit_file", path="dup.py", old_string="x = 1", new_string="z", replace_all=True
    )
    assert (workspace / "dup.py").read_text() == "z\ny = 0\nz\n"
    with pytest.raises(ToolError, match=r"nearest region is lines 1-3(.|\n)*     2\ty = 0"):
        await call(workspace, "edit_file", path="dup.py", old_string="y = 00", new_string="q")
    with pytest.raises(ToolError, match="use write_file"):
        await call(workspace, "edit_file", path="dup.py", old_string="", new_string="q")


async def test_an_ambiguous_edit_suggests_replace_all_only_where_it_is_offered(
    workspace: Path,
) -> None:
    (workspace / "main.py").write_text("from shop import calc_total\nprint(calc_total(1))\n")
    edit = TOOLS.get("edit_file")
    assert edit is not None
    args = {"path": "main.py", "old_string": "calc_total", "new_string": "total_price"}
    with pytest.raises(ToolError, match="or set replace_all to true only if"):
        await edit.run(args, ToolContext(workspace=workspace))
    hidden = ToolContext(workspace=workspace, hidden_arguments=frozenset({"edit_file.replace_all"}))
    with pytest.raises(ToolError) as err:
        await edit.run(args, hidden)
    assert "replace_all" not in str(
        err.value
    ) and "edit one place at a time: copy one whole line below" in str(err.value)
    assert "     2\tprint(calc_total(1))" in str(err.value)
    # fix-line-add: the line itself repeats (add and sub), so one line cannot be enough.
    (workspace / "calc.py").write_text(
        "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
    )
    same = {"path": "calc.py", "old_string": "return a - b", "new_string": "return a + b"}
    with pytest.raises(ToolError) as err:
        await edit.run(same, hidden)
    assert (
        "these lines repeat in the file, so copy one place below together with the "
        "line before it (both lines) as old_string" in str(err.value)
    )
    assert "     1\tdef add(a, b):\n     2\t    return a - b" in str(err.value)


@pytest.mark.parametrize(
    "path",
    ["../outside.txt", "/etc/passwd", "a/../../x", "link/x.txt", "escape.txt", ".git/config"],
)
async def test_confinement_refuses_paths_outside_the_workspace(
    workspace: Path, tmp_path: Path, path: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.txt").write_text("secret")
    os.symlink(outside, workspace / "link")
    os.symlink(outside / "x.txt", workspace / "escape.txt")
    (workspace / ".git").mkdir()
    with pytest.raises(ToolError, match="outside the workspace|inside .git"):
        await call(workspace, "write_file", path=path, content="pwned")
    if not path.startswith(".git"):
        with pytest.raises(ToolError, match="outside the workspace"):
            await call(workspace, "read_file", path=path)
    assert (outside / "x.txt").read_text() == "secret"


async def test_absolute_path_inside_the_workspace_is_fine(workspace: Path) -> None:
    await call(workspace, "write_file", path=str(workspace / "in.txt"), content="ok")
    assert (workspace / "in.txt").read_text() == "ok"


async def test_list_files_and_grep(workspace: Path) -> None:
    (workspace / "src").mkdir()
    (workspace / "src/a.py").write_text("def alpha():\n    pass\n")
    (workspace / "src/b.txt").write_text("Alpha beta\n")
    (workspace / ".git").mkdir()
    (workspace / ".git/HEAD").write_text("alpha")
    out = await call(workspace, "list_files")
    assert out.text.splitlines() == ["src/a.py", "src/b.txt"]
    out = await call(workspace, "list_files", pattern="*.py")
    assert out.text == "src/a.py"
    out = await call(workspace, "grep", pattern="alpha", ignore_case=True)
    assert out.text.splitlines() == ["src/a.py:1: def alpha():", "src/b.txt:1: Alpha beta"]
    out = await call(workspace, "grep", pattern="alpha", glob="*.txt")
    assert out.text == "no matches"
    with pytest.raises(ToolError, match="invalid regular expression"):
        await call(workspace, "grep", pattern="(")


async def test_bash_runs_in_workspace_and_reports_exit_code(workspace: Path) -> None:
    out = await call(workspace, "bash", command="pwd; echo err >&2; exit 3")
    lines = out.text.splitlines()
    assert lines[0].startswith("exit code 3") and lines[1:] == [str(workspace), "err"]


async def test_bash_timeout_kills_the_whole_process_group(workspace: Path) -> None:
    pidfile = workspace / "child.pid"
    started = time.monotonic()
    out = await call(
        workspace, "bash", command=f"sleep 60 & echo $! > {pidfile}; sleep 60", timeout_s=1
    )
    assert time.monotonic() - started < 10
    assert "timed out after 1s" in out.text
    child = int(pidfile.read_text())
    time.sleep(0.2)
    try:  # gone, or a zombie waiting for init to reap it
        assert psutil.Process(child).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        pass


async def test_bash_output_is_capped_with_a_note(workspace: Path) -> None:
    out = await call(workspace, "bash", command="seq 1 100000")
    assert "output capped" in out.text and len(out.text) < 3000
    assert out.text.rstrip().endswith("100000")


@pytest.mark.parametrize(
    ("command", "read_only"),
    [
        ("ls -la", True),
        ("git status", True),
        ("cat a | grep x | wc -l", True),
        ("grep -r foo . 2>/dev/null", True),
        ("rm -rf x", False),
        ("echo hi > f", False),
        ("sed -i s/a/b/ f", False),
        ("find . -delete", False),
        ("git commit -m x", False),
        ("ls; rm x", False),
        ("echo $(rm x)", False),
        ("python setup.py", False),
        ("git branch -D main", False),
        ("'unterminated", False),
    ],
)
def test_read_only_command_classification(command: str, read_only: bool, workspace: Path) -> None:
    assert is_read_only_command(command, workspace) is read_only


async def test_git_tools_on_a_real_repository(repo: Path) -> None:
    (repo / "hello.py").write_text("def greet():\n    return 'hello'\n")
    (repo / "new.txt").write_text("new\n")
    status = await call(repo, "git_status")
    assert " M hello.py" in status.text and "?? new.txt" in status.text
    diff = await call(repo, "git_diff", path="hello.py")
    assert "+    return 'hello'" in diff.text
    out = await call(repo, "git_commit", message="Say hello", paths=["hello.py"])
    assert "committed" in out.text and "Say hello" in out.text
    r = git.Repo(repo)
    assert r.head.commit.message.strip() == "Say hello"
    assert r.untracked_files == ["new.txt"]  # only the given path was committed
    log = await call(repo, "git_log", limit=5)
    assert [line.split(": ", 1)[1] for line in log.text.splitlines()] == ["Say hello", "initial"]
    with pytest.raises(ToolError, match="nothing to commit"):
        await call(repo, "git_commit", message="again", paths=["hello.py"])


async def test_git_tools_outside_a_repository(workspace: Path) -> None:
    with pytest.raises(ToolError, match="not inside a git repository"):
        await call(workspace, "git_status")


def test_tool_specs_are_valid_openai_functions() -> None:
    for spec in TOOLS.specs():
        fn: Any = spec["function"]
        assert spec["type"] == "function" and fn["parameters"]["type"] == "object"
        assert set(fn["parameters"]["required"]) <= set(fn["parameters"]["properties"])


def test_undo_store_respects_gitignore(repo: Path, tmp_path: Path) -> None:
    from sparkcode.agent import UndoStore

    store = UndoStore(repo, tmp_path / "data")
    (repo / "debug.log").write_text("keep me")
    store.snapshot("one")
    (repo / "hello.py").write_text("changed\n")
    (repo / "debug.log").write_text("changed log")
    snap, changed = store.undo()
    assert changed == ["hello.py"]
    assert (repo / "debug.log").read_text() == "changed log"  # ignored: never touched
    assert (
        subprocess.run(
            ["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True
        ).stdout
        == ""
    )
    from sparkcode.agent import UndoError

    with pytest.raises(UndoError, match="nothing to undo"):
        store.undo()
