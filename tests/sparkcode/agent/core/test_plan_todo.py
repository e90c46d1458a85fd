"""Plan mode and the todo tool: a plan turn changes nothing, act keeps the list."""

from __future__ import annotations

import io
import json
from pathlib import Path

from sparkcode.agent import Agent, AgentSettings, ChatClient, Permissions
from sparkcode.agent.core.events import (
    ApprovalRequested,
    Event,
    TodoItem,
    TodoUpdated,
    ToolCallFinished,
    TurnFinished,
    event_to_json,
)
from sparkcode.agent.core.loop import ACT_PROMPT, PLAN_NOTE
from sparkcode.agent.tools import BwrapStatus
from sparkcode.cli._run import EXIT_OK, RunRequest, run_headless
from sparkcode.config import Config, PermissionRule
from sparkcode.start import SessionOptions
from tests.support.http_server import serve, url
from tests.support.scripted import Reply, ScriptedServer


def todo(**args: object) -> tuple[str, str]:
    return ("todo", json.dumps(args))


async def run(agent: Agent, text: str) -> list[Event]:
    events = []
    async for event in agent.run_turn(text):
        events.append(event)
        if isinstance(event, ApprovalRequested):
            event.respond(True)
    return events


def todo_lists(events: list[Event]) -> list[list[tuple[int, str, str]]]:
    return [
        [(i.id, i.text, i.status) for i in e.items] for e in events if isinstance(e, TodoUpdated)
    ]


async def test_plan_then_act_keeps_the_todo_list(workspace: Path) -> None:
    (workspace / "app.py").write_text("print('hi')\n")
    write = ("write_file", json.dumps({"path": "app.py", "content": "print('bye')\n"}))
    server = ScriptedServer(
        [
            # plan turn: a list, a read, an attempted write (refused), the plan
            Reply(
                tool_calls=[
                    todo(action="add", items=["change the greeting", "check it"]),
                    ("read_file", json.dumps({"path": "app.py"})),
                    write,
                ]
            ),
            Reply(content=["Plan: 1. change the greeting 2. check it"]),
            # act turn: work through the list
            Reply(
                tool_calls=[
                    todo(action="update", id=1, status="in_progress"),
                    write,
                    todo(action="update", id=1, status="done"),
                ]
            ),
            Reply(
                tool_calls=[
                    ("bash", json.dumps({"command": "cat app.py"})),
                    todo(action="update", id="2", status="done"),
                ]
            ),
            Reply(content=["done"]),
        ]
    )
    client = ChatClient("http://engine.test/v1", "m", transport=server.transport())
    # An allow rule does not open plan mode up.
    config = Config(allow=(PermissionRule.parse("write_file"),))
    perms = Permissions(config, mode="plan", bwrap=BwrapStatus(None, "none"))
    agent = Agent(client, workspace, settings=AgentSettings(), permissions=perms)

    planned = await run(agent, "say bye instead")
    assert (workspace / "app.py").read_text() == "print('hi')\n"  # nothing changed
    results = [e for e in planned if isinstance(e, ToolCallFinished)]
    assert results[1].error is None and "print('hi')" in results[1].result
    assert results[2].error is not None and results[2].error.startswith("refused: plan mode")
    assert todo_lists(planned) == [
        [(1, "change the greeting", "pending"), (2, "check it", "pending")]
    ]
    finished = planned[-1]
    assert isinstance(finished, TurnFinished) and finished.reason == "stop"
    assert server.requests[0]["messages"][-1]["content"] == "say bye instead" + PLAN_NOTE

    assert perms.set_mode("ask") is None
    acted = await run(agent, ACT_PROMPT)
    assert (workspace / "app.py").read_text() == "print('bye')\n"
    assert todo_lists(acted) == [
        [(1, "change the greeting", "in_progress"), (2, "check it", "pending")],
        [(1, "change the greeting", "done"), (2, "check it", "pending")],
        [(1, "change the greeting", "done"), (2, "check it", "done")],
    ]
    assert server.requests[2]["messages"][-1]["content"] == ACT_PROMPT
    # The prompt prefix is the same in both modes.
    first, later = server.requests[0], server.requests[-1]
    assert first["tools"] == later["tools"]
    assert first["messages"][0] == later["messages"][0]


async def test_todo_mistakes_are_clear_errors(workspace: Path) -> None:
    server = ScriptedServer(
        [
            Reply(
                tool_calls=[
                    todo(action="update", id=3, status="done"),
                    todo(action="add"),
                    todo(action="add", items=["a"]),
                    todo(action="update", id=1, status="finished"),
                    todo(action="add", text="b"),
                    todo(action="add", text=" "),
                    todo(action="remove"),
                ]
            ),
            Reply(content=["ok"]),
        ]
    )
    client = ChatClient("http://engine.test/v1", "m", transport=server.transport())
    agent = Agent(
        client,
        workspace,
        permissions=Permissions(Config(), mode="ask", bwrap=BwrapStatus(None, "")),
    )
    events = await run(agent, "x")
    errors = [e.error for e in events if isinstance(e, ToolCallFinished)]
    assert errors[0] == "there is no item 3; the list is empty"
    assert errors[1] == "add needs items: a list of non-empty texts"
    assert errors[2] is None
    assert errors[3] is not None and "status must be one of pending, in_progress, done" in errors[3]
    # One item given as ``text`` is that item; a blank one is still an error.
    assert errors[4] is None and errors[5] == "add needs items: a list of non-empty texts"
    assert errors[6] is not None and "action must be add, update or list" in errors[6]
    assert [item.text for item in agent.todos.items] == ["a", "b"]
    agent.clear()
    assert agent.todos.items == ()


def test_todo_events_are_plain_json() -> None:
    event = TodoUpdated(items=(TodoItem(id=1, text="a"), TodoItem(id=2, text="b", status="done")))
    data = event_to_json(event)
    assert data["type"] == "TodoUpdated"
    assert data["items"] == [
        {"id": 1, "text": "a", "status": "pending"},
        {"id": 2, "text": "b", "status": "done"},
    ]
    json.dumps(data)


async def test_run_plan_prints_todo_events_and_changes_nothing(workspace: Path) -> None:
    write = ("write_file", json.dumps({"path": "x.txt", "content": "x"}))
    with serve(
        [
            Reply(tool_calls=[todo(action="add", items=["write x.txt"]), write]),
            Reply(content=["The plan: write x.txt"]),
        ]
    ) as server:
        out, err = io.StringIO(), io.StringIO()
        code = await run_headless(
            RunRequest(
                prompt="make x",
                workspace=workspace,
                as_json=True,
                endpoint=url(server),
                session=SessionOptions(permission_mode="plan", record=False),
            ),
            out=out,
            err=err,
        )
    assert code == EXIT_OK, err.getvalue()
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    todos = [e for e in events if e["type"] == "TodoUpdated"]
    assert todos == [
        {
            "type": "TodoUpdated",
            "at": todos[0]["at"],
            "items": [{"id": 1, "text": "write x.txt", "status": "pending"}],
        }
    ]
    assert not (workspace / "x.txt").exists()
    assert events[-1]["content"] == "The plan: write x.txt"


def test_a_recorded_todo_list_plays_back() -> None:
    from sparkcode.replay._play import event_from_record
    from sparkcode.sessions import SessionEvent

    recorded = event_to_json(TodoUpdated(items=(TodoItem(id=1, text="a", status="done"),)))
    recorded.pop("type")
    event = event_from_record(SessionEvent(t_ns=1, type="TodoUpdated", data=recorded))
    assert isinstance(event, TodoUpdated)
    assert event.items == (TodoItem(id=1, text="a", status="done"),)
