"""The lost-definitions guard (``[agent] refuse_lost_definitions``): a change that
would delete a Python file's top-level functions or classes the task does not name is
refused and the file left as it was; a write that keeps them, a new file, a broken file
and other languages pass. Real files in a temp workspace; the loop test runs the setting from
AgentSettings to the result the model reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkcode.agent import AgentSettings, ChatClient, Permissions, ToolCallFinished
from sparkcode.agent.core.loop import Agent
from sparkcode.agent.tools import ToolContext, ToolError, ToolOutput, default_tools
from sparkcode.agent.tools._lost import lost_definitions
from sparkcode.config import Config
from tests.support.scripted import Reply, ScriptedServer

MATHX = "def double(x):\n    return 2 * x\n"
TEST_MATHX = (
    "import unittest\n\nfrom mathx import double\n\n\n"
    "class TestMathx(unittest.TestCase):\n    def test_double(self):\n"
    "        self.assertEqual(double(4), 8)\n"
)
"""The agent suite's add-function-square workspace."""
SQUARE = "def square(x):\n    return x ** 2\n"
"""What the 1.5B wrote over mathx.py, and then over test_mathx.py (2026-12-04)."""


async def write(ws: Path, path: str, content: str, guard: bool = True) -> ToolOutput:
    tool = default_tools().get("write_file")
    assert tool is not None
    ctx = ToolContext(workspace=ws, refuse_lost_definitions=guard)
    args = {"path": path, "content": content}
    await tool.preview(args, ctx)  # an approval would show this: it is refused first
    return await tool.run(args, ctx)


async def test_the_suites_overwrites_are_refused_and_the_files_kept(workspace: Path) -> None:
    (workspace / "mathx.py").write_text(MATHX)
    (workspace / "test_mathx.py").write_text(TEST_MATHX)
    with pytest.raises(ToolError) as refused:
        await write(workspace, "mathx.py", SQUARE)
    assert str(refused.value) == (
        "mathx.py was not written: write_file replaces the whole file, and this content "
        "would delete double. The file is as it was. To add to it, use edit_file with its "
        "last lines as old_string and those lines plus the new code as new_string; or send "
        "write_file again with the whole file, keeping it."
    )
    with pytest.raises(ToolError, match="would delete TestMathx. .* keeping it"):
        await write(workspace, "test_mathx.py", SQUARE)
    assert (workspace / "mathx.py").read_text() == MATHX
    assert (workspace / "test_mathx.py").read_text() == TEST_MATHX


async def test_writes_that_lose_nothing_pass(workspace: Path) -> None:
    (workspace / "mathx.py").write_text(MATHX)
    out = await write(workspace, "mathx.py", MATHX + "\n\n" + SQUARE)  # the whole file
    assert out.text.startswith("overwrote mathx.py")
    await write(workspace, "new.py", SQUARE)  # a new file
    (workspace / "broken.py").write_text("def f(:\n")
    await write(workspace, "broken.py", SQUARE)  # broken before: left to be mended
    (workspace / "notes.txt").write_text("def double\n")
    await write(workspace, "notes.txt", "")  # not Python
    await write(workspace, "mathx.py", SQUARE, guard=False)  # the setting off
    assert (workspace / "mathx.py").read_text() == SQUARE


async def test_an_edit_that_replaces_a_definition_the_task_does_not_name_is_refused(
    workspace: Path,
) -> None:
    """add-function-clamp: the 1.5B replaced ``def within`` by ``def clamp`` with
    edit_file; a rename the message asks for passes."""
    (workspace / "limits.py").write_text("def within(x, low, high):\n    return low <= x <= high\n")
    tool = default_tools().get("edit_file")
    assert tool is not None
    args = {
        "path": "limits.py",
        "old_string": "def within(x, low, high):\n    return low <= x <= high\n",
        "new_string": "def clamp(x, low, high):\n    return max(low, min(high, x))\n",
    }
    ctx = ToolContext(
        workspace=workspace,
        refuse_lost_definitions=True,
        task="Add a function clamp(x, low, high) to limits.py",
    )
    with pytest.raises(ToolError) as refused:
        await tool.run(args, ctx)
    assert str(refused.value) == (
        "limits.py was not changed: this edit would delete within, which the task does "
        "not name. The file is as it was. To add code beside it, keep the lines of "
        "old_string in new_string and put the new code after them."
    )
    assert "within" in (workspace / "limits.py").read_text()
    ctx.task = "Replace within by clamp in limits.py."
    out = await tool.run(args, ctx)
    assert out.text.startswith("edited limits.py")


def test_lost_definitions_names_functions_classes_and_methods_in_order() -> None:
    old = (
        "import os\nX = 1\n\nclass A:\n    def m(self): ...\n\nasync def b(): ...\n\ndef c(): ...\n"
    )
    assert lost_definitions(old, "def c(): ...\n") == ["A", "b"]
    assert lost_definitions(old, "class A: ...\nasync def b(): ...\nc = 2\n") == ["A.m", "c"]
    assert lost_definitions(old, "def (") == []  # the syntax guard's case
    assert lost_definitions(old, "\n") == []  # emptied
    methods = "class T:\n    def test_a(self): ...\n    def test_b(self): ...\n"
    assert lost_definitions(methods, "class T:\n    def test_c(self): ...\n") == [
        "T.test_a",
        "T.test_b",
    ]
    assert lost_definitions(
        methods, "class T:\n    def test_c(self): ...\n", task="rename test_a to test_c"
    ) == ["T.test_b"]
    assert lost_definitions(methods, "x = 1\n") == ["T"]  # not its methods too
    assert lost_definitions(old, "def c(): ...\n", task="remove class A, keep b2") == ["b"]


async def test_the_setting_reaches_the_model_as_the_calls_result(workspace: Path) -> None:
    """AgentSettings -> the loop's ToolContext -> the result the next request carries."""
    (workspace / "mathx.py").write_text(MATHX)
    lost = ("write_file", json.dumps({"path": "mathx.py", "content": SQUARE}))
    added = (
        "edit_file",
        json.dumps(
            {
                "path": "mathx.py",
                "old_string": "    return 2 * x\n",
                "new_string": "    return 2 * x\n\n\n" + SQUARE,
            }
        ),
    )
    server = ScriptedServer(
        [Reply(tool_calls=[lost]), Reply(tool_calls=[added]), Reply(content=["added"])]
    )
    client = ChatClient("http://engine.test/v1", "m", transport=server.transport())
    agent = Agent(
        client,
        workspace,
        settings=AgentSettings(refuse_lost_definitions=True),
        permissions=Permissions(Config(), mode="full-auto"),
    )
    finished = [
        e async for e in agent.run_turn("add square to mathx.py") if isinstance(e, ToolCallFinished)
    ]
    assert [f.error is None for f in finished] == [False, True]
    assert "would delete double" in server.requests[1]["messages"][-1]["content"]
    assert (workspace / "mathx.py").read_text() == MATHX + "\n\n" + SQUARE
