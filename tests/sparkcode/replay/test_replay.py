"""Rerun, compare, minimize and play against a deterministic scripted server."""

from __future__ import annotations

import json
from pathlib import Path

from engine.paths import Paths
from sparkcode.replay import (
    Target,
    details,
    first_divergence,
    minimize,
    rerun,
    results_json,
    table,
    write_bundle,
)
from sparkcode.sessions import Piece, TurnOutput, load_session
from tests.support.sessions import EchoServer, agentish_turns, record_conversation

TARGET = Target(label="scripted", base_url="http://scripted.test/v1")


def _plant(path: Path, request: int, old: str, new: str) -> None:
    """Change one recorded token of one request (in its raw SSE chunk)."""
    lines = path.read_text(encoding="utf-8").split("\n")
    for n, line in enumerate(lines):
        if f'"kind":"chunk","req":{request},' in line and json.dumps(old)[1:-1] in line:
            record = json.loads(line)
            record["data"] = record["data"].replace(f'"content": "{old}"', f'"content": "{new}"')
            assert record["data"] != json.loads(line)["data"]
            lines[n] = json.dumps(record)
            break
    else:
        raise AssertionError(f"no chunk with {old!r} in request {request}")
    path.write_text("\n".join(lines), encoding="utf-8")


async def test_rerun_of_a_deterministic_session_is_identical(tmp_path: Path) -> None:
    server = EchoServer()
    recorder = await record_conversation(
        agentish_turns("some file")[:3], server.transport(), tmp_path
    )
    session = load_session(recorder.path)
    result = await rerun(session, TARGET, transport=server.transport())
    assert [t.status for t in result.turns] == ["identical"] * 3
    assert [t.turn for t in result.turns] == [1, 2, 3]
    assert all(t.exact_tokens for t in result.turns)
    # The recorded bodies went out unchanged apart from the isolating salt.
    sent = [json.loads(s.body) for s in result.sent]
    recorded = [json.loads(e.body) for e in session.exchanges]
    assert [{k: v for k, v in b.items() if k != "cache_salt"} for b in sent] == recorded
    assert len({b["cache_salt"] for b in sent}) == 1
    exact = await rerun(session, TARGET, transport=server.transport(), isolate=False)
    assert [s.body for s in exact.sent] == [e.body for e in session.exchanges]


async def test_planted_divergence_is_found_at_the_right_turn_and_token(tmp_path: Path) -> None:
    server = EchoServer()
    recorder = await record_conversation(agentish_turns("x")[:3], server.transport(), tmp_path)
    # Request 1 says "echo: PRIME the cache ." -> tokens 0..4; change token 2 (" the").
    _plant(recorder.path, 1, " the", " a")
    session = load_session(recorder.path)
    result = await rerun(session, TARGET, transport=server.transport())
    assert [t.status for t in result.turns] == ["identical", "diverged", "identical"]
    divergence = result.turns[1].divergence
    assert divergence is not None
    assert (divergence.token, divergence.piece) == (2, 2)
    assert divergence.recorded.startswith("a cache")
    assert divergence.rerun.startswith("the cache")
    data = results_json(session, [result])
    assert "≠@2" in table(data).splitlines()[3]
    assert "first divergence at token 2" in details(data)


def test_divergence_uses_the_servers_token_count() -> None:
    # Two tokens in one frame (speculative decoding): positions follow usage, not frames.
    recorded = TurnOutput(
        pieces=[Piece("content", "ab", 0), Piece("content", "cd", 2), Piece("content", "ef", 4)]
    )
    rerun_out = TurnOutput(pieces=[Piece("content", "ab", 0), Piece("content", "cX", 2)])
    divergence = first_divergence(recorded, rerun_out)
    assert divergence is not None and (divergence.token, divergence.piece) == (2, 1)
    same_text = TurnOutput(pieces=[Piece("content", "abcd", 0), Piece("content", "ef", 4)])
    assert first_divergence(recorded, same_text) is None  # only the framing differs
    reasoning = TurnOutput(
        pieces=[Piece("reasoning", "ab", 0), Piece("content", "cd", 2), Piece("content", "ef", 4)]
    )
    moved = first_divergence(recorded, reasoning)
    assert moved is not None and moved.token == 0 and moved.recorded.startswith("[content]")
    switched = TurnOutput(pieces=[Piece("content", "ab", 0), Piece("reasoning", "cd", 2)])
    late = first_divergence(recorded, switched)
    assert late is not None and (late.token, late.piece) == (2, 1)
    shorter = first_divergence(recorded, TurnOutput(pieces=recorded.pieces[:2]))
    assert shorter is not None and (shorter.token, shorter.piece) == (4, 2)
    assert shorter.rerun.startswith("<end")


async def test_rerun_flags_a_degenerate_turn(tmp_path: Path) -> None:
    server = EchoServer()
    recorder = await record_conversation(
        agentish_turns("the needle is here"), server.transport(), tmp_path
    )
    session = load_session(recorder.path)
    result = await rerun(session, TARGET, transport=EchoServer().transport())
    flagged = [t.turn for t in result.turns if t.flagged]
    assert flagged == [4]
    assert result.turns[3].rerun_detector is not None
    assert result.turns[3].status == "identical"  # degenerate in the recording too
    assert "DEGEN" in table(results_json(session, [result]))


async def test_minimize_keeps_the_turn_the_flagged_one_depends_on(tmp_path: Path) -> None:
    tool_output = "line of file text\n" * 40 + "the needle is here\n" + "more text\n" * 60
    server = EchoServer()
    recorder = await record_conversation(agentish_turns(tool_output), server.transport(), tmp_path)
    session = load_session(recorder.path)
    found = await minimize(session, TARGET, 3, "degenerate", transport=EchoServer().transport())
    # Turn 2 (request 1, PRIME) is what turn 4 depends on; 1 and 3 are not needed.
    assert found.kept_requests == [1, 3]
    kept = found.trims["id:call_1"]
    needle_end = tool_output.index("needle") + len("needle")
    assert needle_end <= kept < needle_end + 64 < len(tool_output)
    bundle = write_bundle(tmp_path / "bundle", session, TARGET, found)
    names = sorted(p.name for p in bundle.iterdir())
    assert names == ["README.md", "engine.sh", "repro.sh", "requests", "session.jsonl"]
    bodies = [json.loads(p.read_text()) for p in sorted((bundle / "requests").iterdir())]
    assert [b["messages"][-1]["content"] for b in bodies] == ["PRIME the cache", "TRIGGER now"]
    assert "cache_salt" not in bodies[1]
    assert len(bodies[1]["messages"][2]["content"]) < 200
    script = (bundle / "repro.sh").read_text()
    assert script.count("curl ") == 2 and "requests/02.json" in script
    minimized = load_session(bundle / "session.jsonl")
    assert minimized.problems == [] and len(minimized.exchanges) == 2
    assert minimized.header["minimized_from"] == session.id
    assert "turn 4" in (bundle / "README.md").read_text()


async def test_requests_the_server_refused_are_not_resent(tmp_path: Path) -> None:
    import httpx

    from sparkcode.agent.wire.client import ChatClient
    from sparkcode.replay import model_turns
    from sparkcode.sessions import start_recording

    echo = EchoServer()

    async def handler(request: httpx.Request) -> httpx.Response:
        if b"reasoning_effort" in request.content:
            return httpx.Response(
                400, json={"error": {"message": "reasoning_effort is not supported by this model"}}
            )
        return await echo.handle(request)

    recorder, transport = start_recording(
        "http://scripted.test/v1",
        workspace=tmp_path,
        paths=Paths.from_env(),
        inner=httpx.MockTransport(handler),
    )
    client = ChatClient("http://scripted.test/v1", "m", transport=transport)
    async with client.stream_chat(
        [{"role": "user", "content": "hi there"}], params={"reasoning_effort": "low"}
    ) as stream:
        async for _ in stream:
            pass
    await client.aclose()
    recorder.close()
    session = load_session(recorder.path)
    assert [e.status for e in session.exchanges] == [400, 200]
    assert [e.index for e in model_turns(session)] == [1]
    result = await rerun(session, TARGET, transport=EchoServer().transport())
    assert [(t.request, t.status) for t in result.turns] == [(1, "identical")]
