"""Small-model mode against a scripted server: the schema is sent, steps are run."""

from __future__ import annotations

import json
from pathlib import Path

from sparkcode.agent import ToolCallFinished, ToolCallStarted, TurnFinished
from sparkcode.agent._structured import read_step, step_schema
from sparkcode.agent.tools import default_tools
from tests.agent.scripted import Reply, ScriptedServer
from tests.agent.test_loop import make_agent, of, run


def test_the_schema_offers_each_tool_with_its_arguments_or_an_answer() -> None:
    tools = default_tools()
    options = step_schema(tools)["anyOf"]
    assert [o["properties"].get("tool", {}).get("const") for o in options] == \
        [*tools.names, None]
    write = options[tools.names.index("write_file")]
    assert write["properties"]["arguments"]["required"] == ["path", "content"]
    assert write["properties"]["arguments"]["additionalProperties"] is False
    assert options[-1]["required"] == ["answer"]
    assert read_step('{"answer": "hi"}') is not None
    assert read_step('{"tool": "x"') is None  # cut off


async def test_steps_are_run_and_the_answer_ends_the_turn(workspace: Path) -> None:
    step = json.dumps({"tool": "write_file", "arguments": {"path": "n.md", "content": "hi"}})
    server = ScriptedServer([Reply(content=[step[:20], step[20:]]),
                             Reply(content=['{"answer": "wrote n.md"}'])])
    agent = make_agent(server, workspace, structured_tools=True)
    events = await run(agent, "write n.md")
    first = server.requests[0]
    assert "tools" not in first and "tool_choice" not in first
    assert first["structured_outputs"]["disable_any_whitespace"] is True
    assert len(first["structured_outputs"]["json"]["anyOf"]) == len(default_tools().names) + 1
    assert '{"tool": "NAME", "arguments": {...}}' in first["messages"][0]["content"]
    assert "- write_file(path: string, content: string)" in first["messages"][0]["content"]
    assert [(s.name, s.arguments) for s in of(events, ToolCallStarted)] == \
        [("write_file", {"path": "n.md", "content": "hi"})]
    assert [f.error for f in of(events, ToolCallFinished)] == [None]
    assert (workspace / "n.md").read_text() == "hi"
    assert of(events, TurnFinished)[-1].content == "wrote n.md"
    # The model sees its own step as it wrote it (its template may render no calls).
    said = [m for m in server.requests[1]["messages"] if m["role"] == "assistant"]
    assert said[0]["content"] == step
    assert agent.history[-1]["content"] == '{"answer": "wrote n.md"}'
