"""Steering a running turn (``Agent.steer``): delivered after the tool results as an
appended user message, or left for the caller when the turn answers first."""

from __future__ import annotations

import json
from pathlib import Path

from sparkcode.agent.core import events as ev
from tests.sparkcode.agent.core.test_loop import make_agent
from tests.support.scripted import Reply, ScriptedServer


async def test_a_steer_goes_in_after_the_tool_results_and_keeps_the_prefix(workspace: Path) -> None:
    read = ("read_file", json.dumps({"path": "README.md"}))
    server = ScriptedServer([Reply(tool_calls=[read, read]), Reply(content=["ok"])])
    agent = make_agent(server, workspace)
    seen: list[ev.Event] = []
    async for event in agent.run_turn("look"):
        seen.append(event)
        if isinstance(event, ev.ToolCallStarted) and not agent.steering:
            agent.steer("only the title, please")  # mid-calls: waits for both results
    kinds = [type(e).__name__ for e in seen]
    steered = kinds.index("SteerDelivered")
    assert kinds[steered - 1] == "ToolCallFinished" and kinds.count("ToolCallFinished") == 2
    assert kinds[steered + 1] == "RequestStarted"
    assert seen[steered] == ev.SteerDelivered(text="only the title, please", request=2)
    first, second = (r["messages"] for r in server.requests)
    assert second[: len(first)] == first
    assert [m["role"] for m in second[len(first) :]] == ["assistant", "tool", "tool", "user"]
    assert agent.take_steering() == [] and agent.turns == 1


async def test_a_turn_that_answers_first_leaves_the_steer_to_the_caller(workspace: Path) -> None:
    server = ScriptedServer([Reply(content=["done"])])
    agent = make_agent(server, workspace)
    async for event in agent.run_turn("hi"):
        if isinstance(event, ev.RequestStarted):
            agent.steer("too late")
    assert agent.take_steering() == ["too late"]
    assert [m["role"] for m in agent.history] == ["system", "user", "assistant"]
