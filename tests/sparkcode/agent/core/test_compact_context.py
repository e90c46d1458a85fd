"""``/compact [focus]`` and ``/context`` on the agent: a manual compaction keeps the
open todo list word for word and passes the focus to the summariser; the context
report splits the window by part."""

from __future__ import annotations

import json
from pathlib import Path

from sparkcode.agent.core import events as ev
from sparkcode.agent.core.context import SUMMARY_PREFIX, estimate_tokens
from sparkcode.agent.core.context_report import context_report
from sparkcode.agent.extensions.instructions import InstructionFile, Instructions
from tests.sparkcode.agent.core.test_loop import make_agent
from tests.support.scripted import Reply, ScriptedServer

TODO = ("todo", json.dumps({"action": "add", "items": ["read the code", "fix the bug"]}))
READ = ("read_file", json.dumps({"path": "README.md"}))


async def drain(stream: object) -> list[ev.Event]:
    return [event async for event in stream]  # type: ignore[attr-defined]


async def test_compact_keeps_the_open_todo_list_and_the_focus(workspace: Path) -> None:
    server = ScriptedServer(
        [
            Reply(tool_calls=[TODO]),
            Reply(content=["planned"]),
            Reply(content=["The user wants the bug fixed."]),
            Reply(content=["on it"]),
        ]
    )
    agent = make_agent(server, workspace, context_limit=8192)
    assert [e for e in await drain(agent.compact_now()) if isinstance(e, ev.Notice)][
        0
    ].code == "nothing_to_compact"  # an empty conversation: said, nothing sent
    assert server.requests == []
    await drain(agent.run_turn("plan the fix"))
    events = await drain(agent.compact_now("the failing test in test_app.py"))
    [done] = [e for e in events if isinstance(e, ev.ContextCompacted)]
    assert done.messages_summarised == 4  # user, call, result, answer: the whole turn
    asked = server.requests[2]["messages"][-1]["content"]
    assert "Above all, keep: the failing test in test_app.py" in asked
    summary = agent.history[1]["content"]
    assert summary.startswith(SUMMARY_PREFIX + "The user wants the bug fixed.")
    assert summary.endswith(
        "The todo list, still open:\ntodo list (0 of 2 done):\n"
        "  1. [ ] read the code\n  2. [ ] fix the bug"
    )
    assert [m["role"] for m in agent.history] == ["system", "user", "assistant"]
    await drain(agent.run_turn("go on"))
    assert server.requests[3]["messages"][:3] == agent.history[:3]


def test_context_report_splits_the_window_by_part(workspace: Path) -> None:
    instructions = Instructions(
        files=(
            InstructionFile(
                path=workspace / "AGENTS.md",
                shown="AGENTS.md",
                text="Run pytest -q. " * 40,
                size=600,
            ),
        )
    )
    server = ScriptedServer([])
    agent = make_agent(server, workspace, context_limit=8192)
    agent.history[0]["content"] = instructions.system_prompt(agent.history[0]["content"])
    tool = {"role": "tool", "tool_call_id": "c1", "content": "x" * 4000}
    agent.history += [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "y" * 800,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": "{}"},
                }
            ],
        },
        tool,
    ]
    report = context_report(agent)
    parts = dict(report.parts)
    assert parts["AGENTS.md"] >= len("Run pytest -q. " * 40) // 4
    assert parts["thinking kept"] == 200 and parts["tool results"] == estimate_tokens([tool])
    assert parts["tools"] == len(json.dumps(agent.tools.specs())) // 4
    assert report.used == sum(parts.values()) and report.limit == 8192
    text = report.text()
    assert "| free | " in text and "context window 8,192 tokens" in text
    assert "no request measured yet" in text
