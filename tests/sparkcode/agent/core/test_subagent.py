"""The ``task`` tool's explore sub-conversation against a scripted server: read-only,
its summary is the result, its events come nested, it is recorded and loads again,
a cancel stops it, and what goes wrong inside it becomes the tool's result."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from engine.paths import Paths
from engine.profiles import AgentKnobs, load_profile
from sparkcode.agent import (
    Agent,
    AgentSettings,
    ChatClient,
    Event,
    Permissions,
    ReasoningDelta,
    RequestStarted,
    TaskEvent,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
    TurnStarted,
    default_tools,
    event_to_json,
)
from sparkcode.agent.core.subagent import TASK_NOTE
from sparkcode.cli._run import EXIT_OK, RunRequest, run_headless
from sparkcode.config import Config
from sparkcode.replay import play_events, rebuild_conversation
from sparkcode.sessions import SessionStore
from sparkcode.start import SessionOptions, build_session, resolve_target
from tests.support.http_server import serve, url
from tests.support.scripted import Reply, ScriptedServer

ASK = ("task", json.dumps({"description": "find greet", "prompt": "Where is greet defined?"}))
SUMMARY = "greet is defined in hello.py, line 1; it returns 'hi'."


def make_agent(server: ScriptedServer, workspace: Path, **settings: Any) -> Agent:
    client = ChatClient("http://engine.test/v1", "m", transport=server.transport())
    return Agent(
        client,
        workspace,
        settings=AgentSettings(**settings),
        permissions=Permissions(Config(), mode="full-auto"),
        tools=default_tools(),
    )


async def run(agent: Agent, text: str = "explain greet") -> list[Event]:
    return [event async for event in agent.run_turn(text)]


def nested(events: list[Event], kind: type) -> list[Any]:
    return [e.event for e in events if isinstance(e, TaskEvent) and isinstance(e.event, kind)]


def top(events: list[Event], kind: type) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def ws_with_greet(workspace: Path) -> Path:
    (workspace / "hello.py").write_text("def greet():\n    return 'hi'\n")
    return workspace


async def test_the_task_explores_read_only_and_its_summary_is_the_result(workspace: Path) -> None:
    ws_with_greet(workspace)
    server = ScriptedServer(
        [
            Reply(tool_calls=[ASK]),
            # Inside the task: a write, a shell write and a read; only the read runs.
            Reply(
                tool_calls=[
                    ("write_file", json.dumps({"path": "x.txt", "content": "x"})),
                    ("bash", json.dumps({"command": "touch made.txt"})),
                    ("read_file", json.dumps({"path": "hello.py"})),
                ]
            ),
            Reply(content=[SUMMARY]),
            Reply(content=["It returns 'hi'."]),
        ]
    )
    agent = make_agent(server, workspace)
    events = await run(agent)

    assert not (workspace / "x.txt").exists() and not (workspace / "made.txt").exists()
    inner = {e.name: e for e in nested(events, ToolCallFinished)}
    assert "read-only" in (inner["write_file"].error or "")
    assert "read-only" in (inner["bash"].error or "")
    assert inner["read_file"].error is None and "return 'hi'" in inner["read_file"].result
    # The nested events are a whole turn of their own, under the task's call ID.
    call = top(events, ToolCallStarted)[0]
    assert call.name == "task"
    wrapped = [e for e in events if isinstance(e, TaskEvent)]
    assert {e.call_id for e in wrapped} == {call.call_id}
    assert isinstance(wrapped[0].event, TurnStarted)
    assert isinstance(wrapped[-1].event, TurnFinished) and wrapped[-1].event.content == SUMMARY
    order = [type(e).__name__ for e in events if not isinstance(e, TaskEvent)]
    assert order.index("ToolCallStarted") < order.index("ToolCallFinished")
    result = top(events, ToolCallFinished)[0]
    assert result.name == "task" and result.result == SUMMARY and result.error is None
    # The conversation holds the task's call and its summary, none of its messages.
    assert agent.history[-2] == {"role": "tool", "tool_call_id": call.call_id, "content": SUMMARY}
    assert top(events, TurnFinished)[-1].content == "It returns 'hi'."
    # Its first request shares the conversation's prefix: the same system prompt and tools.
    main, sub = server.requests[0], server.requests[1]
    assert sub["messages"][0] == main["messages"][0] and sub["tools"] == main["tools"]
    assert sub["messages"][1] == {"role": "user", "content": "Where is greet defined?" + TASK_NOTE}
    assert len(server.requests[3]["messages"]) == len(main["messages"]) + 2


async def test_a_task_inside_a_task_and_a_second_task_are_refused(workspace: Path) -> None:
    server = ScriptedServer(
        [
            Reply(tool_calls=[ASK]),
            Reply(tool_calls=[ASK]),  # the task asks for a task of its own
            Reply(content=["nothing found"]),
            Reply(content=["ok"]),
        ]
    )
    agent = make_agent(server, workspace)
    events = await run(agent)
    inner = nested(events, ToolCallFinished)
    assert len(inner) == 1 and "not available inside an explore task" in (inner[0].error or "")
    assert top(events, ToolCallFinished)[0].result == "nothing found"
    assert agent.explorer is not None and agent.explorer.child is None


async def test_an_error_inside_the_task_is_the_tool_result_and_the_turn_goes_on(
    workspace: Path,
) -> None:
    server = ScriptedServer(
        [
            Reply(tool_calls=[ASK]),
            Reply(status=500, error_body={"error": {"message": "engine overloaded"}}),
            Reply(content=["I will look myself."]),
        ]
    )
    agent = make_agent(server, workspace)
    events = await run(agent)
    result = top(events, ToolCallFinished)[0]
    assert result.error is not None and "the explore task failed" in result.error
    assert "engine overloaded" in result.result
    finished = top(events, TurnFinished)[-1]
    assert finished.reason == "stop" and finished.content == "I will look myself."


async def test_a_task_that_uses_its_requests_says_so(workspace: Path) -> None:
    read = ("read_file", json.dumps({"path": "hello.py"}))
    server = ScriptedServer(
        [Reply(tool_calls=[ASK]), Reply(tool_calls=[read]), Reply(content=["fine"])]
    )
    agent = make_agent(server, ws_with_greet(workspace), task_max_requests=1)
    events = await run(agent)
    result = top(events, ToolCallFinished)[0]
    assert "used all its model requests (1)" in (result.error or "")
    assert top(events, TurnFinished)[-1].reason == "stop"


async def test_cancel_stops_the_sub_conversation_and_the_turn(workspace: Path) -> None:
    server = ScriptedServer([Reply(tool_calls=[ASK]), Reply(until_closed=True)])
    agent = make_agent(server, workspace)
    events: list[Event] = []
    async for event in agent.run_turn("explain greet"):
        events.append(event)
        if isinstance(event, TaskEvent) and isinstance(event.event, ReasoningDelta):
            agent.cancel()  # Esc in the TUI, session/cancel in ACP
    assert server.frames_sent < 1000  # the sub-conversation's stream was closed
    assert nested(events, TurnFinished)[0].reason == "cancelled"
    result = top(events, ToolCallFinished)[0]
    assert result.error == "the explore task was cancelled"
    assert top(events, TurnFinished)[-1].reason == "cancelled"
    assert len(server.requests) == 2  # nothing was sent after the cancel
    # The history stays valid to send: the task's call has its result.
    assert agent.history[-1]["role"] == "tool"


async def test_run_json_shows_the_nested_events_and_the_session_loads_again(
    workspace: Path,
) -> None:
    ws_with_greet(workspace)
    read = ("read_file", json.dumps({"path": "hello.py"}))
    replies = [
        Reply(tool_calls=[ASK]),
        Reply(tool_calls=[read]),
        Reply(content=[SUMMARY]),
        Reply(content=["It says hi."]),
    ]
    with serve(replies) as server:
        out, err = io.StringIO(), io.StringIO()
        code = await run_headless(
            RunRequest(
                prompt="explain greet",
                workspace=workspace,
                as_json=True,
                endpoint=url(server),
                session=SessionOptions(permission_mode="full-auto"),
            ),
            out=out,
            err=err,
        )
    assert code == EXIT_OK, err.getvalue()
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    tasks = [e for e in events if e["type"] == "TaskEvent"]
    assert [e["event"]["type"] for e in tasks if e["event"]["type"].startswith("ToolCall")] == [
        "ToolCallStarted",
        "ToolCallFinished",
    ]
    finished = [e for e in events if e["type"] == "ToolCallFinished"]
    assert finished[0]["name"] == "task" and finished[0]["result"] == SUMMARY

    store = SessionStore(Paths.from_env().sessions_dir)
    (path,) = store.files()
    session = store.load(path.stem)
    call_id = finished[0]["call_id"]
    assert [e.task for e in session.exchanges if e.path.endswith("/chat/completions")] == [
        None,
        call_id,
        call_id,
        None,
    ]
    recorded = [e for e in session.events if e.type == "TaskEvent"]
    assert recorded and all(r.data["call_id"] == call_id for r in recorded)
    assert not [
        r for r in recorded if r.data["event"]["type"] in ("ContentDelta", "ReasoningDelta")
    ]
    # Resumed: the conversation's own history, the task's summary as its result.
    rebuilt = await rebuild_conversation(session, store=store)
    assert rebuilt.turns == 1 and rebuilt.notes == []
    assert [m["role"] for m in rebuilt.history] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert rebuilt.history[3]["content"] == SUMMARY
    # Played back: the task's requests and calls come nested under the call again.
    played = [e async for e in play_events(session, speed=0)]
    assert [
        type(e.event).__name__
        for e in played
        if isinstance(e, TaskEvent)
        and type(e.event).__name__ in ("RequestStarted", "ToolCallStarted")
    ] == ["RequestStarted", "ToolCallStarted", "RequestStarted"]
    assert all(e.call_id == call_id for e in played if isinstance(e, TaskEvent))
    assert [e.request for e in played if isinstance(e, RequestStarted)] == [1, 2]


def test_a_task_event_is_json_with_its_inner_event() -> None:
    event = TaskEvent(
        call_id="c1",
        event=ToolCallStarted(
            call_id="i1", name="grep", arguments={"pattern": "x"}, raw_arguments='{"pattern":"x"}'
        ),
    )
    data = event_to_json(event)
    assert data["type"] == "TaskEvent" and data["call_id"] == "c1"
    assert data["event"]["type"] == "ToolCallStarted" and data["event"]["name"] == "grep"


async def test_the_task_tool_is_offered_per_profile(workspace: Path, paths: Paths) -> None:
    assert load_profile("cpu-demo", paths).agent.task_tool is False
    assert load_profile("cpu-coder", paths).agent.task_tool is False
    assert load_profile("glm53-flash-spark", paths).agent.task_tool is True
    server = ScriptedServer([])
    target = resolve_target(workspace, paths, endpoint="http://engine.test/v1")
    for wanted, expected in ((None, True), (False, False)):
        session = await build_session(
            target,
            SessionOptions(
                record=False, transport=server.transport(), knobs=AgentKnobs(task_tool=wanted)
            ),
            paths,
        )
        assert ("task" in session.agent.tools.names) is expected
        assert (session.agent.explorer is not None) is expected
        await session.aclose()
