"""The todo list comes back with a resumed, continued or forked session: rebuilt from
the recorded ``TodoUpdated`` events as it stood after the turn resumed from, so the
model can go on marking the plan's items where it left off."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from engine.paths import Paths
from sparkcode.agent.core.events import TodoItem
from sparkcode.cli._run import EXIT_OK, RunRequest, run_headless
from sparkcode.replay import rebuild_conversation
from sparkcode.sessions import SessionStore, load_session
from sparkcode.start import SessionOptions, find_resume, write_fork
from tests.sparkcode.start.test_resume import start, turn
from tests.sparkcode.start.test_resume import ws as ws  # the fixture
from tests.support.http_server import serve, url
from tests.support.scripted import Reply, ScriptedServer


def todo(**args: Any) -> tuple[str, str]:
    return ("todo", json.dumps(args))


def items(*spec: tuple[int, str, str]) -> tuple[TodoItem, ...]:
    return tuple(TodoItem(id=i, text=t, status=s) for i, t, s in spec)  # type: ignore[arg-type]


AFTER_1 = items((1, "read the code", "in_progress"), (2, "fix the bug", "pending"))
AFTER_2 = items((1, "read the code", "done"), (2, "fix the bug", "pending"))


async def record_plan(ws: Path, paths: Paths) -> str:
    """Two turns: a list of two items, then the first item done."""
    server = ScriptedServer(
        [
            Reply(
                tool_calls=[
                    todo(action="add", items=["read the code", "fix the bug"]),
                    todo(action="update", id=1, status="in_progress"),
                ]
            ),
            Reply(content=["plan made"]),
            Reply(tool_calls=[todo(action="update", id=1, status="done")]),
            Reply(content=["step 1 done"]),
        ]
    )
    session = await start(server, ws, paths)
    await turn(session, "plan the fix")
    await turn(session, "do step 1")
    assert session.agent.todos.items == AFTER_2
    await session.aclose()
    assert session.session_id is not None
    return session.session_id


async def test_the_rebuilt_list_is_the_one_after_the_turn_resumed_from(
    ws: Path, paths: Paths
) -> None:
    sid = await record_plan(ws, paths)
    store = SessionStore(paths.sessions_dir)
    assert (await find_resume(store, ws, latest=True)).todos == AFTER_2
    session = store.load(sid)
    assert (await rebuild_conversation(session, turn=1, store=store)).todos == AFTER_1
    assert (await rebuild_conversation(session, turn=0, store=store)).todos == ()
    # A fork at turn 1 (nothing sent yet) has the list of turn 1, and so has its resume.
    fork_id = write_fork(paths, await rebuild_conversation(session, turn=1, store=store), {})
    assert (await find_resume(store, ws, session_id=fork_id)).todos == AFTER_1


async def test_a_cut_last_turn_leaves_its_changes_to_the_list_out(ws: Path, paths: Paths) -> None:
    sid = await record_plan(ws, paths)
    path = SessionStore(paths.sessions_dir).resolve(sid)
    lines = path.read_bytes().split(b"\n")
    # Cut inside the last response, after the second turn's todo change was recorded.
    last_request = max(i for i, line in enumerate(lines) if b'"kind":"request"' in line)
    path.write_bytes(b"\n".join(lines[: last_request + 3]) + b'\n{"kind":"chu')
    rebuilt = await rebuild_conversation(load_session(path))
    assert rebuilt.turns == 1 and rebuilt.todos == AFTER_1


async def test_a_cleared_conversation_resumes_without_the_list(ws: Path, paths: Paths) -> None:
    server = ScriptedServer(
        [
            Reply(tool_calls=[todo(action="add", items=["a"])]),
            Reply(content=["ok"]),
            Reply(content=["fresh"]),
        ]
    )
    session = await start(server, ws, paths)
    await turn(session, "plan")
    session.agent.clear()  # /clear in the TUI
    await turn(session, "something else")
    await session.aclose()
    rebuilt = await find_resume(SessionStore(paths.sessions_dir), ws, latest=True)
    assert rebuilt.turns == 1 and rebuilt.todos == ()


async def test_run_resume_goes_on_with_the_recorded_list(ws: Path, paths: Paths) -> None:
    sid = await record_plan(ws, paths)
    replies = [
        Reply(tool_calls=[todo(action="update", id=2, status="done")]),
        Reply(content=["all done"]),
    ]
    with serve(replies) as server:
        out, err = io.StringIO(), io.StringIO()
        code = await run_headless(
            RunRequest(
                prompt="do step 2",
                workspace=ws,
                as_json=True,
                endpoint=url(server),
                resume=sid,
                session=SessionOptions(permission_mode="full-auto"),
            ),
            paths,
            out=out,
            err=err,
        )
    assert code == EXIT_OK, err.getvalue()
    # The restored list is said before the turn...
    assert "todo list (1 of 2 done):" in err.getvalue()
    assert "  2. [ ] fix the bug" in err.getvalue()
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    finished = [e for e in events if e["type"] == "ToolCallFinished"]
    # ...and the model's update of item 2 finds it (a fresh list would say "no item 2").
    assert finished[0]["error"] is None, finished[0]
    todos = [e["items"] for e in events if e["type"] == "TodoUpdated"]
    assert todos == [
        [
            {"id": 1, "text": "read the code", "status": "done"},
            {"id": 2, "text": "fix the bug", "status": "done"},
        ]
    ]
    # The new recording names its parent, so resuming it again keeps the list too.
    again = await find_resume(SessionStore(paths.sessions_dir), ws, latest=True)
    assert again.session_id != sid and again.turns == 3
    assert again.todos == items((1, "read the code", "done"), (2, "fix the bug", "done"))
