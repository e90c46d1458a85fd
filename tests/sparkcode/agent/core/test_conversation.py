"""The loop's conversation features against a scripted server: seeds and sampling,
preserved thinking, and /undo + /redo rewinding the history with the files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkcode.agent import RedoApplied, TurnFinished, UndoApplied, UndoError, UndoStore
from sparkcode.agent.wire.sampling import request_seed
from tests.sparkcode.agent.core.test_loop import make_agent, of, run
from tests.support.scripted import Reply, ScriptedServer

WRITE = json.dumps({"path": "notes.md", "content": "hello\n"})


async def test_every_request_carries_its_derived_seed_and_the_sampling(workspace: Path) -> None:
    server = ScriptedServer(
        [Reply(tool_calls=[("list_files", "{}")]), Reply(content=["a"]), Reply(content=["b"])]
    )
    agent = make_agent(server, workspace, seed=1234, temperature=1.0, top_p=0.9)
    await run(agent, "one")
    await run(agent, "two")
    seeds = [r["seed"] for r in server.requests]
    assert seeds == [request_seed(1234, n) for n in range(3)]
    assert len(set(seeds)) == 3  # a different seed per request, the same per session
    assert all(r["temperature"] == 1.0 and r["top_p"] == 0.9 for r in server.requests)
    assert request_seed(1234, 0) == request_seed(1234, 0) != request_seed(1235, 0)


async def test_no_seed_is_sent_when_seeding_is_off(workspace: Path) -> None:
    server = ScriptedServer([Reply(content=["a"])])
    await run(make_agent(server, workspace), "one")
    assert "seed" not in server.requests[0] and "top_p" not in server.requests[0]


async def test_thinking_history_sends_reasoning_back_within_the_turn_only(workspace: Path) -> None:
    server = ScriptedServer(
        [
            Reply(reasoning=["look ", "first"], tool_calls=[("list_files", "{}")]),
            Reply(reasoning=["now ", "answer"], content=["done"]),
            Reply(content=["again"]),
        ]
    )
    agent = make_agent(server, workspace, thinking_history=True)
    await run(agent, "one")
    second = server.requests[1]["messages"]
    assert second[2]["role"] == "assistant" and second[2]["reasoning_content"] == "look first"
    await run(agent, "two")
    third = server.requests[2]["messages"]
    assert all("reasoning_content" not in m for m in third)  # an earlier turn's: dropped
    # Apart from the dropped field, the earlier turn is what was sent before.
    assert third[2] == {k: v for k, v in second[2].items() if k != "reasoning_content"}


async def test_without_thinking_history_no_reasoning_goes_back(workspace: Path) -> None:
    server = ScriptedServer(
        [Reply(reasoning=["x"], tool_calls=[("list_files", "{}")]), Reply(content=["done"])]
    )
    await run(make_agent(server, workspace), "one")
    assert all("reasoning_content" not in m for m in server.requests[1]["messages"])


async def test_undo_rewinds_files_and_messages_and_redo_brings_both_back(
    repo: Path, tmp_path: Path
) -> None:
    server = ScriptedServer(
        [
            Reply(content=["hi"]),  # turn 1: no change
            Reply(tool_calls=[("write_file", WRITE)]),
            Reply(content=["wrote it"]),  # turn 2
            Reply(content=["after undo"]),
        ]
    )
    store = UndoStore(repo, tmp_path / "data")
    agent = make_agent(server, repo, undo=store)
    await run(agent, "hello")
    after_one = [dict(m) for m in agent.history]
    await run(agent, "write notes")
    after_two = [dict(m) for m in agent.history]
    assert (repo / "notes.md").read_text() == "hello\n"

    undone = agent.undo()
    assert isinstance(undone, UndoApplied) and undone.turn == 2
    assert undone.changed == ("notes.md",) and undone.messages_removed == 4
    assert agent.history == after_one and not (repo / "notes.md").exists()

    redone = agent.redo()
    assert isinstance(redone, RedoApplied) and redone.messages_restored == 4
    assert agent.history == after_two and (repo / "notes.md").read_text() == "hello\n"

    agent.undo()
    events = await run(agent, "go on")
    assert of(events, TurnFinished)[0].content == "after undo"
    # The next request's prefix is the conversation before the undone turn, byte for byte.
    sent = server.requests[-1]["messages"]
    assert json.dumps(sent[: len(after_one)]) == json.dumps(after_one)
    with pytest.raises(UndoError, match="nothing to redo"):
        agent.redo()  # a new turn ends redo


async def test_undo_of_a_turn_that_changed_no_file_rewinds_the_chat_only(
    repo: Path, tmp_path: Path
) -> None:
    server = ScriptedServer([Reply(content=["one"]), Reply(content=["two"])])
    agent = make_agent(server, repo, undo=UndoStore(repo, tmp_path / "data"))
    await run(agent, "a")
    await run(agent, "b")
    event = agent.undo()
    assert event.turn == 2 and event.changed == () and event.snapshot == ""
    assert [m["content"] for m in agent.history[1:]] == ["a", "one"]
    assert agent.turns == 1
    agent.undo()
    assert len(agent.history) == 1
    with pytest.raises(UndoError, match="nothing to undo"):
        agent.undo()  # the store has no snapshot either
