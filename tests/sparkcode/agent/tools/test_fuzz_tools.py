"""Fuzzing (hypothesis) of tool-call argument parsing and the read-only rule.

Properties: nothing crashes, every rejection is a message that names the
problem, and a command line the rule lets run without approval changes
nothing and reads nothing outside the workspace when really run (inside the
sandbox, with the outside directory made writable so a write would show).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkcode.agent.core.calls import check_call
from sparkcode.agent.tools import (
    Sandbox,
    ToolContext,
    ToolError,
    check_read_only,
    default_tools,
    find_bwrap,
)
from sparkcode.agent.tools._shell import run_command
from sparkcode.agent.wire.client import ToolCall

TOOLS = default_tools()
FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


@FUZZ
@given(
    name=st.sampled_from([*TOOLS.names, "", "nope", " bash "]) | st.text(max_size=12),
    raw=st.text(max_size=80) | json_values.map(json.dumps),
)
def test_check_call_never_crashes_and_keeps_the_history_valid(name: str, raw: str) -> None:
    checked = check_call(ToolCall(index=0, id="c1", name=name, arguments=raw), TOOLS)
    assert isinstance(json.loads(checked.history_arguments), dict)
    if checked.error is None:
        assert checked.tool is not None and isinstance(checked.args, dict)
        assert all(r in checked.args for r in checked.tool.required)
    else:
        assert checked.tool is None and len(checked.error) > 20


def _args_for(tool: str) -> st.SearchStrategy[dict[str, Any]]:
    spec = TOOLS.get(tool)
    assert spec is not None
    keys = st.sampled_from([*spec.parameters, "extra"])
    return st.dictionaries(keys, json_values, max_size=4)


@FUZZ
@given(tool=st.sampled_from([n for n in TOOLS.names if n != "bash"]), data=st.data())
def test_tools_answer_any_arguments_with_a_result_or_a_clear_error(
    tool: str, data: Any, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    (ws / "a.txt").write_text("alpha\nbeta\n")
    args = data.draw(_args_for(tool))
    checked = check_call(ToolCall(index=0, id="c", name=tool, arguments=json.dumps(args)), TOOLS)
    if checked.tool is None:
        return
    try:
        out = asyncio.run(checked.tool.run(checked.args, ToolContext(workspace=ws.resolve())))
    except ToolError as exc:
        assert str(exc).strip(), "an empty refusal"
        return
    assert isinstance(out.text, str)


@FUZZ
@given(timeout=json_values)
def test_bash_rejects_a_bad_timeout_clearly(timeout: Any, tmp_path: Path) -> None:
    bash = TOOLS.get("bash")
    assert bash is not None
    try:
        out = asyncio.run(
            bash.run({"command": "true", "timeout_s": timeout}, ToolContext(workspace=tmp_path))
        )
    except ToolError as exc:
        assert "timeout_s" in str(exc)
        return
    assert out.text.startswith(("exit code 0", "[timed out"))


@FUZZ
@given(command=st.text(max_size=60))
def test_the_read_only_rule_never_crashes(command: str, tmp_path: Path) -> None:
    reason = check_read_only(command, tmp_path)
    assert reason is None or (isinstance(reason, str) and reason)


NAMES = [
    "ls",
    "cat",
    "head",
    "tail",
    "wc",
    "sort",
    "uniq",
    "sed",
    "awk",
    "find",
    "grep",
    "git",
    "diff",
    "date",
    "tr",
    "echo",
    "stat",
    "file",
    "du",
    "cut",
    "nl",
    "env",
    "tee",
    "touch",
]
WORDS = [
    "-o",
    "-i",
    "-n",
    "-r",
    "-R",
    "-L",
    "-e",
    "-f",
    "-T",
    "-s",
    "-w",
    "-l",
    "-c",
    "-1",
    "--",
    "-exec",
    "-delete",
    "-fprint",
    "-name",
    "-maxdepth",
    "1",
    ";",
    "+",
    "--output=../out/o",
    "--compress-program=touch",
    "log",
    "diff",
    "branch",
    "status",
    "show",
    "-C",
    "--no-pager",
    "p",
    "1p",
    "s/a/b/",
    "s/a/b/w ../out/w",
    "1e touch ran",
    "w ../out/w2",
    "{print}",
    '{print > "../out/p"}',
    'BEGIN{system("touch ran")}',
    "NR==1",
    "a.txt",
    "b.txt",
    ".",
    "..",
    "*",
    "link-out",
    "../out/x",
    "../out",
    "../secret.txt",
    "ran",
    "touch ran",
    "/dev/null",
    "~",
    "HEAD",
]
SEPARATORS = [" | ", " ; ", " && ", " || "]


def _quote(word: str) -> str:
    return (
        word
        if word.replace("-", "").replace(".", "").replace("/", "").isalnum()
        else "'" + word.replace("'", "'\\''") + "'"
    )


command_lines = st.lists(
    st.tuples(st.sampled_from(NAMES), st.lists(st.sampled_from(WORDS), max_size=4)),
    min_size=1,
    max_size=2,
).flatmap(
    lambda cmds: st.lists(
        st.sampled_from(SEPARATORS), min_size=len(cmds) - 1, max_size=len(cmds) - 1
    ).map(
        lambda seps: "".join(
            (seps[i - 1] if i else "") + " ".join([name, *map(_quote, words)])
            for i, (name, words) in enumerate(cmds)
        )
    )
)


def _state(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for f in filenames + dirnames:
            p = Path(dirpath, f)
            st_ = p.lstat()
            out[str(p.relative_to(root))] = (st_.st_size, st_.st_mtime_ns)
    return out


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(command=command_lines)
def test_what_the_rule_lets_run_changes_nothing_and_reads_nothing_outside(
    command: str, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    if not ws.exists():
        ws.mkdir()
        (tmp_path / "out").mkdir()
        (tmp_path / "secret.txt").write_text("SECRET-CONTENT\n")
        (ws / "a.txt").write_text("a\nb\nc\n")
        (ws / "b.txt").write_text("a\nc\n")
        (ws / "link-out").symlink_to(tmp_path / "secret.txt")
        subprocess.run(["git", "init", "-q"], cwd=ws, check=True)
    if check_read_only(command, ws) is not None:
        return
    status = find_bwrap()
    assert status.path is not None, status.reason
    # Run it for real, confined, with everything it might touch writable.
    box = Sandbox(status.path, writable=(tmp_path,))
    before = _state(tmp_path)
    try:
        # 30 s, not 5: a read-only command finishes in milliseconds, but in the suite the
        # other worker's engine may hold both cores (`find -s -s -s`, which exits at once
        # with an error, once timed out at 5 s there).
        out = asyncio.run(
            run_command(command, ToolContext(workspace=ws.resolve(), sandbox=box), 30)
        )
    finally:
        box.cleanup()
    after = _state(tmp_path)
    assert after == before, f"{command!r} changed files: {set(after.items()) ^ set(before.items())}"
    assert "SECRET-CONTENT" not in out.text, f"{command!r} read outside the workspace"
    assert "timed out" not in out.text


@FUZZ
@given(
    command=command_lines,
    tail=st.sampled_from(
        [
            " ; touch x",
            " && rm -rf .",
            " | sh",
            " > out",
            " $(id)",
            " `id`",
            " & sleep 1",
            " | tee x",
            " | xargs rm",
        ]
    ),
)
def test_a_write_appended_to_any_line_asks(command: str, tail: str, tmp_path: Path) -> None:
    reason = check_read_only(command + tail, tmp_path)
    assert reason, f"{command + tail!r} was classified read-only"
