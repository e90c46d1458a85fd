"""Resume and fork from the recording, through the session builder, against a
scripted server: the rebuilt history is the agent's, byte for byte; damaged and
old recordings resume from the last complete turn and say so; bad input is
named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.errors import UserError
from engine.paths import Paths
from engine.profiles import AgentKnobs
from sparkcode.replay import ResumeError, rebuild_conversation
from sparkcode.sessions import SessionStore, load_session
from sparkcode.start import (
    AgentSession,
    SessionOptions,
    WorkspaceMismatch,
    build_session,
    find_resume,
    latest_session,
    resolve_target,
    write_fork,
)
from tests.support.scripted import Reply, ScriptedServer

WRITE = json.dumps({"path": "notes.md", "content": "hello\n"})


async def start(
    server: ScriptedServer, workspace: Path, paths: Paths, **options: Any
) -> AgentSession:
    target = resolve_target(workspace, paths, endpoint="http://engine.test/v1")
    return await build_session(
        target,
        SessionOptions(
            origin="run", permission_mode="full-auto", transport=server.transport(), **options
        ),
        paths,
    )


async def turn(session: AgentSession, text: str) -> None:
    async for _ in session.agent.run_turn(text):
        pass


def bodies(session_id: str, paths: Paths) -> list[bytes]:
    recorded = SessionStore(paths.sessions_dir).load(session_id)
    return [e.body for e in recorded.exchanges if e.path.endswith("/chat/completions")]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


async def record_two_turns(ws: Path, paths: Paths) -> tuple[str, list[dict[str, Any]]]:
    server = ScriptedServer(
        [
            Reply(tool_calls=[("write_file", WRITE)]),
            Reply(content=["ok"]),
            Reply(content=["second"]),
        ]
    )
    session = await start(server, ws, paths)
    await turn(session, "write notes")
    await turn(session, "and then?")
    history = [dict(m) for m in session.agent.history]
    await session.aclose()
    assert session.session_id is not None
    return session.session_id, history


async def test_resume_rebuilds_the_history_and_repeats_the_prefix_byte_for_byte(
    ws: Path, paths: Paths
) -> None:
    sid, history = await record_two_turns(ws, paths)
    store = SessionStore(paths.sessions_dir)
    rebuilt = await find_resume(store, ws, latest=True)
    assert rebuilt.session_id == sid and rebuilt.turns == 2 and rebuilt.notes == []
    assert rebuilt.history == history

    server = ScriptedServer([Reply(content=["third"])])
    resumed = await start(server, ws, paths, resume=rebuilt)
    await turn(resumed, "go on")
    await resumed.aclose()
    assert resumed.session_id is not None and resumed.session_id != sid
    first = bodies(resumed.session_id, paths)[0]
    last = bodies(sid, paths)[-1]
    # The recorded messages of the last request are a byte-exact prefix of the new one.
    recorded_msgs = json.dumps(
        json.loads(last)["messages"], ensure_ascii=False, separators=(",", ":")
    )
    assert recorded_msgs.encode() in last  # what was recorded, byte for byte...
    assert recorded_msgs[:-1].encode() in first  # ...opens the resumed request's messages
    header = load_session(SessionStore(paths.sessions_dir).resolve(resumed.session_id)).header
    assert header["parent"] == sid and header["parent_turn"] == 2
    assert isinstance(header["sampling"]["seed"], int)
    # --continue now finds the resumed session, which holds all three turns.
    again = await find_resume(store, ws, latest=True)
    assert again.session_id == resumed.session_id and again.turns == 3


async def test_a_cut_tail_resumes_from_the_last_complete_turn_and_says_so(
    ws: Path, paths: Paths
) -> None:
    sid, history = await record_two_turns(ws, paths)
    path = SessionStore(paths.sessions_dir).resolve(sid)
    lines = path.read_bytes().split(b"\n")
    # Cut the file inside the last response, as a kill -9 mid-stream would.
    last_request = max(i for i, line in enumerate(lines) if b'"kind":"request"' in line)
    path.write_bytes(b"\n".join(lines[: last_request + 3]) + b'\n{"kind":"chu')
    rebuilt = await rebuild_conversation(load_session(path))
    assert rebuilt.turns == 1
    assert rebuilt.history == history[:-2]  # the second turn (prompt and answer) is left out
    assert any("did not finish" in n for n in rebuilt.notes), rebuilt.notes


async def test_an_older_format_and_corrupt_lines_are_named(ws: Path, paths: Paths) -> None:
    sid, history = await record_two_turns(ws, paths)
    path = SessionStore(paths.sessions_dir).resolve(sid)
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    header["format"] = 1
    del header["sampling"]
    path.write_text("\n".join([json.dumps(header), *lines[1:3], "{not json", *lines[3:]]) + "\n")
    rebuilt = await rebuild_conversation(load_session(path))
    assert rebuilt.history == history
    assert any("older format (1" in n for n in rebuilt.notes)
    assert any("corrupt line" in n for n in rebuilt.notes)


async def test_fork_at_a_turn_and_resume_the_fork(ws: Path, paths: Paths) -> None:
    sid, history = await record_two_turns(ws, paths)
    store = SessionStore(paths.sessions_dir)
    session = store.load(sid)
    rebuilt = await rebuild_conversation(session, turn=1, store=store)
    assert rebuilt.turns == 1 and rebuilt.total_turns == 2
    # Turn 1 through its final answer: system, user, call, tool result, answer.
    assert rebuilt.history == history[:5]
    fork_id = write_fork(paths, rebuilt, {})
    forked = await find_resume(store, ws, session_id=fork_id)
    assert forked.session_id == fork_id and forked.turns == 1
    assert forked.history == history[:5]
    with pytest.raises(ResumeError, match="has 2 turns; there is no turn 5"):
        await rebuild_conversation(session, turn=5, store=store)


async def test_bad_input_is_named(ws: Path, paths: Paths, tmp_path: Path) -> None:
    store = SessionStore(paths.sessions_dir)
    with pytest.raises(UserError, match="no recorded session of .* to continue"):
        await find_resume(store, ws, latest=True)
    sid, _ = await record_two_turns(ws, paths)
    with pytest.raises(UserError, match="no session with ID 'ffffffff'"):
        await find_resume(store, ws, session_id="ffffffff")
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(WorkspaceMismatch, match=f"recorded in {ws}, not in {other}") as info:
        await find_resume(store, other, session_id=sid)
    assert info.value.recorded == ws
    assert latest_session(store, other) is None
    rebuilt = await find_resume(store, other, session_id=sid, any_workspace=True)
    assert rebuilt.workspace == str(ws)


async def test_undo_after_resume_rewinds_a_recorded_turn(ws: Path, paths: Paths) -> None:
    (ws / ".keep").write_text("")
    sid, history = await record_two_turns(ws, paths)
    store = SessionStore(paths.sessions_dir)
    rebuilt = await find_resume(store, ws, session_id=sid)
    assert [m.snapshot is not None for m in rebuilt.marks] == [True, False]
    resumed = await start(ScriptedServer([]), ws, paths, resume=rebuilt)
    resumed.agent.undo()  # turn 2: chat only
    event = resumed.agent.undo()  # turn 1: wrote notes.md
    assert event.changed == ("notes.md",) and not (ws / "notes.md").exists()
    assert resumed.agent.history == history[:1]
    await resumed.aclose()


async def test_undo_after_resume_in_small_model_mode_takes_back_whole_turns(
    ws: Path, paths: Paths
) -> None:
    """With ``results_as_user`` the recording holds each tool result as a user message
    ("Result: ..."); a resumed conversation's turns are still the user's two."""
    (ws / ".keep").write_text("")
    call = '{"tool":"write_file","arguments":' + WRITE + "}"
    server = ScriptedServer(
        [
            Reply(content=[call]),
            Reply(content=['{"answer":"ok"}']),
            Reply(content=['{"answer":"second"}']),
        ]
    )
    knobs = AgentKnobs(structured_tools=True, results_as_user=True)
    session = await start(server, ws, paths, knobs=knobs)
    await turn(session, "write notes")
    await turn(session, "and then?")
    await session.aclose()
    assert session.session_id is not None and (ws / "notes.md").exists()
    rebuilt = await find_resume(SessionStore(paths.sessions_dir), ws, session_id=session.session_id)
    assert any(str(m.get("content")).startswith("Result:\n") for m in rebuilt.history)
    assert [(m.turn, m.snapshot is not None) for m in rebuilt.marks] == [(1, True), (2, False)]
    resumed = await start(ScriptedServer([]), ws, paths, resume=rebuilt, knobs=knobs)
    assert resumed.agent.undo().turn == 2
    event = resumed.agent.undo()
    assert (event.turn, event.changed) == (1, ("notes.md",)) and not (ws / "notes.md").exists()
    await resumed.aclose()


async def test_undo_recorded_after_the_last_request_is_applied(ws: Path, paths: Paths) -> None:
    server = ScriptedServer([Reply(content=["one"]), Reply(content=["two"])])
    session = await start(server, ws, paths)
    await turn(session, "a")
    await turn(session, "b")
    session.agent.undo()
    await session.aclose()
    assert session.session_id is not None
    rebuilt = await find_resume(SessionStore(paths.sessions_dir), ws, session_id=session.session_id)
    assert rebuilt.turns == 1 and [m["content"] for m in rebuilt.history[1:]] == ["a", "one"]


async def test_rerun_says_when_it_cannot_be_exact(ws: Path, paths: Paths) -> None:
    from sparkcode.replay import seed_note

    seeded_id, _ = await record_two_turns(ws, paths)
    store = SessionStore(paths.sessions_dir)
    assert seed_note(store.load(seeded_id)) is None
    server = ScriptedServer([Reply(content=["x"])])
    session = await start(server, ws, paths, seed="off", knobs=AgentKnobs(temperature=1.0))
    await turn(session, "hi")
    await session.aclose()
    assert session.session_id is not None
    note = seed_note(store.load(session.session_id))
    assert note is not None and note.startswith("this rerun cannot be exact: 1 of 1 requests")
    assert 'seed = "off"' in note
    # A recording from before seeds (format 1) says so.
    path = store.resolve(session.session_id)
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    header["format"] = 1
    path.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    old = seed_note(store.load(session.session_id))
    assert old is not None and "recorded before sparkcode sent a sampling seed" in old


async def test_a_salvaged_call_at_the_end_is_rebuilt_as_the_agent_held_it(
    ws: Path, paths: Paths
) -> None:
    """The model wrote its call as text (the server's parser missed it): the agent
    salvaged it; the rebuilt tail has the same call, id and answer text."""
    text = '<tool_call>\n{"name": "list_files", "arguments": {}}\n</tool_call>'
    server = ScriptedServer([Reply(content=[text]), Reply(content=["listed"])])
    session = await start(server, ws, paths, knobs=AgentKnobs(max_turns=1))
    await turn(session, "list")
    history = [dict(m) for m in session.agent.history]
    await session.aclose()
    assert history[2]["tool_calls"][0]["id"].startswith("salvaged_"), history
    assert session.session_id is not None
    rebuilt = await find_resume(SessionStore(paths.sessions_dir), ws, session_id=session.session_id)
    assert rebuilt.history == history


async def test_a_last_call_of_a_session_tool_is_rebuilt_as_the_agent_held_it(
    ws: Path, paths: Paths
) -> None:
    """A tool that is not built in (a skill here; the navigation, MCP and web tools
    alike) is checked against the schema the recorded request offered, so its
    arguments are normalised as the agent normalised them (the null dropped)."""
    skill = ws / ".agents/skills/alpha/SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("---\nname: alpha\ndescription: The alpha way.\n---\n\nDo alpha.\n")
    call = json.dumps({"name": "alpha", "why": None})
    server = ScriptedServer([Reply(tool_calls=[("skill", call)]), Reply(content=["done"])])
    session = await start(server, ws, paths, knobs=AgentKnobs(max_turns=1))
    await turn(session, "use the alpha skill")
    history = [dict(m) for m in session.agent.history]
    await session.aclose()
    assert history[2]["tool_calls"][0]["function"]["arguments"] == '{"name": "alpha"}'
    assert "Do alpha." in str(history[3]["content"])
    assert session.session_id is not None
    rebuilt = await find_resume(SessionStore(paths.sessions_dir), ws, session_id=session.session_id)
    assert rebuilt.history == history
