"""The syntax guard (``[agent] refuse_syntax_errors``): an edit that would leave a
Python, JSON or TOML file unparsable is refused, nothing is written, and the result
shows the broken lines. Real files in a temp workspace; the loop test runs the
setting from AgentSettings to the tool result the model reads."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from sparkcode.agent import AgentSettings, ChatClient, Permissions, ToolCallFinished
from sparkcode.agent.core.loop import Agent
from sparkcode.agent.tools import ToolContext, ToolError, ToolOutput, default_tools
from sparkcode.config import Config
from tests.support.scripted import Reply, ScriptedServer

TOOLS = default_tools()

TEMPS = (
    'def to_fahrenheit(celsius):\n    """Celsius to Fahrenheit."""\n'
    "    return celsius * 9 / 5 - 32\n\n\n"
    'def to_celsius(fahrenheit):\n    """Fahrenheit to Celsius."""\n'
    "    return (fahrenheit - 32) * 5 / 9\n"
)
"""The tmux run's temps.py (docs/agent.md)."""


async def call(ws: Path, name: str, guard: bool = True, **args: Any) -> ToolOutput:
    tool = TOOLS.get(name)
    assert tool is not None
    ctx = ToolContext(workspace=ws, refuse_syntax_errors=guard)
    await tool.preview(args, ctx)  # an approval would show this: it is refused first
    return await tool.run(args, ctx)


async def test_the_tmux_runs_broken_def_is_refused_and_the_file_left_as_it_was(
    workspace: Path,
) -> None:
    (workspace / "temps.py").write_text(TEMPS)
    with pytest.raises(ToolError) as refused:
        await call(
            workspace,
            "edit_file",
            path="temps.py",
            old_string="to_celsius(fahrenheit)",
            new_string="to_celsius(fahrenheit) # Fixing incorrect calculation",
        )
    message = str(refused.value)
    version = f"Python {sys.version_info.major}.{sys.version_info.minor}"
    assert message.startswith(
        "temps.py was not changed: the result would not be valid Python: line 6: "
    )
    assert f"(as {version} parses it)" in message
    assert "> 6 | def to_celsius(fahrenheit) # Fixing incorrect calculation:" in message
    assert "  8 |     return (fahrenheit - 32) * 5 / 9" in message
    assert message.endswith("The file is as it was; send the change again with that fixed.")
    assert (workspace / "temps.py").read_text() == TEMPS


async def test_without_the_setting_the_same_edit_is_made(workspace: Path) -> None:
    (workspace / "temps.py").write_text(TEMPS)
    out = await call(
        workspace,
        "edit_file",
        guard=False,
        path="temps.py",
        old_string="to_celsius(fahrenheit)",
        new_string="to_celsius(fahrenheit) # x",
    )
    assert out.text.startswith("edited temps.py")
    assert "to_celsius(fahrenheit) # x:" in (workspace / "temps.py").read_text()


async def test_a_right_edit_passes_and_a_broken_file_can_still_be_mended_step_by_step(
    workspace: Path,
) -> None:
    (workspace / "temps.py").write_text(TEMPS)
    await call(
        workspace,
        "edit_file",
        path="temps.py",
        old_string="celsius * 9 / 5 - 32",
        new_string="celsius * 9 / 5 + 32",
    )
    assert "celsius * 9 / 5 + 32" in (workspace / "temps.py").read_text()
    broken = "def f(:\n    return 1\n\ndef g(:\n    return 2\n"
    (workspace / "b.py").write_text(broken)
    await call(workspace, "edit_file", path="b.py", old_string="def f(:", new_string="def f():")
    assert (workspace / "b.py").read_text().startswith("def f():\n")


async def test_write_file_is_held_to_it_for_new_and_existing_files(workspace: Path) -> None:
    with pytest.raises(
        ToolError,
        match=r"^config.json was not changed: the result would not "
        r"be valid JSON: line 2: Expecting",
    ):
        await call(
            workspace,
            "write_file",
            path="config.json",
            content='{"name": "demo",\n "port": 8080,}\n',
        )
    assert not (workspace / "config.json").exists()
    await call(workspace, "write_file", path="config.json", content='{"port": 8080}\n')
    assert json.loads((workspace / "config.json").read_text()) == {"port": 8080}
    (workspace / "temps.py").write_text(TEMPS)
    with pytest.raises(ToolError, match="would not be valid Python: line 1: unterminated string"):
        await call(workspace, "write_file", path="temps.py", content="temp = 'Hello\n")
    assert (workspace / "temps.py").read_text() == TEMPS
    # Emptying a file, or writing a kind of file the guard does not parse, is never refused.
    await call(workspace, "write_file", path="temps.py", content="")
    await call(workspace, "write_file", path="notes.txt", content="def (:\n")
    assert (workspace / "temps.py").read_text() == ""


async def test_a_toml_edit_names_the_line_and_multi_edit_applies_none(workspace: Path) -> None:
    toml = '[project]\nname = "demo"\nversion = "1.0"\n'
    (workspace / "pyproject.toml").write_text(toml)
    with pytest.raises(ToolError) as refused:
        await call(
            workspace,
            "edit_file",
            path="pyproject.toml",
            old_string='version = "1.0"',
            new_string='version "1.1"',
        )
    assert "would not be valid TOML: line 3: Expected '=' after a key" in str(refused.value)
    assert '> 3 | version "1.1"' in str(refused.value)
    (workspace / "m.py").write_text("def f():\n    return 1\n")
    with pytest.raises(
        ToolError, match="m.py was not changed: the result would not be valid Python: line 2"
    ):
        await call(
            workspace,
            "multi_edit",
            path="m.py",
            edits=[
                {"old_string": "return 1", "new_string": "return 2"},
                {"old_string": "return 2", "new_string": "return (2"},
            ],
        )
    assert (workspace / "pyproject.toml").read_text() == toml
    assert (workspace / "m.py").read_text() == "def f():\n    return 1\n"


async def test_the_setting_reaches_the_model_as_the_calls_result(workspace: Path) -> None:
    """AgentSettings -> the loop's ToolContext -> the result the next request carries."""
    (workspace / "temps.py").write_text(TEMPS)
    broken = (
        "edit_file",
        json.dumps({"path": "temps.py", "old_string": "- 32\n", "new_string": "+ 32)\n"}),
    )
    fixed = (
        "edit_file",
        json.dumps({"path": "temps.py", "old_string": "- 32\n", "new_string": "+ 32\n"}),
    )
    server = ScriptedServer(
        [Reply(tool_calls=[broken]), Reply(tool_calls=[fixed]), Reply(content=["fixed"])]
    )
    client = ChatClient("http://engine.test/v1", "m", transport=server.transport())
    agent = Agent(
        client,
        workspace,
        settings=AgentSettings(refuse_syntax_errors=True),
        permissions=Permissions(Config(), mode="full-auto"),
    )
    finished = [e async for e in agent.run_turn("fix it") if isinstance(e, ToolCallFinished)]
    assert [f.error is None for f in finished] == [False, True]
    sent = server.requests[1]["messages"][-1]["content"]
    assert "the result would not be valid Python: line 3" in sent
    assert "> 3 |     return celsius * 9 / 5 + 32)" in sent
    assert "return celsius * 9 / 5 + 32\n" in (workspace / "temps.py").read_text()
