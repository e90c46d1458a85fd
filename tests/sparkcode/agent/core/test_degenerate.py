"""Degenerate streams are stopped (or only reported), in the loop and in ``sparkcode run``."""

from __future__ import annotations

import io
from pathlib import Path

from engine.profiles import AgentKnobs
from sparkcode.agent import DegenerationDetected, TurnFinished
from sparkcode.cli._run import EXIT_DEGENERATE, EXIT_OK, RunRequest, run_headless
from sparkcode.start import SessionOptions
from tests.sparkcode.agent.core.test_loop import make_agent, of, run
from tests.support.http_server import serve, url
from tests.support.scripted import Reply, ScriptedServer

LOOP = ["I will fix it. "] + ["Let me check the file again. "] * 400


async def test_a_looping_answer_is_stopped_as_soon_as_the_detector_fires(workspace: Path) -> None:
    server = ScriptedServer([Reply(content=LOOP)])
    agent = make_agent(server, workspace)
    events = await run(agent, "fix it")
    fired = of(events, DegenerationDetected)
    assert len(fired) == 1 and fired[0].stopped and fired[0].channel == "content"
    assert fired[0].pattern in ("phrase_loop", "block_loop")
    finished = of(events, TurnFinished)[-1]
    assert finished.reason == "degenerate"
    # Stopped within a few repeats, not after all 400.
    assert len(finished.content) < 40 * len(LOOP[1]), len(finished.content)
    assert agent.history[-1] == {"role": "assistant", "content": finished.content}


async def test_looping_reasoning_is_stopped_while_the_server_keeps_sending(workspace: Path) -> None:
    server = ScriptedServer([Reply(until_closed=True)])  # "hmm " until the client hangs up
    events = await run(make_agent(server, workspace, thinking_token_budget=-1), "think")
    assert [f.channel for f in of(events, DegenerationDetected)] == ["reasoning"]
    assert of(events, TurnFinished)[-1].reason == "degenerate"
    assert server.frames_sent < 2000  # the stream was closed, not drained


async def test_warn_only_reports_and_lets_the_answer_finish(workspace: Path) -> None:
    server = ScriptedServer([Reply(content=LOOP)])
    events = await run(make_agent(server, workspace, degenerate="warn"), "fix it")
    fired = of(events, DegenerationDetected)
    assert len(fired) == 1 and not fired[0].stopped
    finished = of(events, TurnFinished)[-1]
    assert finished.reason == "stop" and finished.content == "".join(LOOP)


async def test_off_does_not_watch(workspace: Path) -> None:
    server = ScriptedServer([Reply(content=LOOP)])
    events = await run(make_agent(server, workspace, degenerate="off"), "fix it")
    assert not of(events, DegenerationDetected)


async def test_sparkcode_run_exits_4_and_says_why(workspace: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    with serve([Reply(content=LOOP)]) as server:
        code = await run_headless(
            RunRequest(
                prompt="fix it",
                workspace=workspace,
                endpoint=url(server),
                session=SessionOptions(record=False),
            ),
            out=out,
            err=err,
        )
    assert code == EXIT_DEGENERATE
    assert "degenerate content after" in err.getvalue()
    assert "stopped the stream" in err.getvalue() and "stopped: degenerate" in err.getvalue()
    out, err = io.StringIO(), io.StringIO()
    with serve([Reply(content=LOOP)]) as server:
        code = await run_headless(
            RunRequest(
                prompt="fix it",
                workspace=workspace,
                endpoint=url(server),
                session=SessionOptions(record=False, knobs=AgentKnobs(degenerate_streams="warn")),
            ),
            out=out,
            err=err,
        )
    assert code == EXIT_OK and "warning only" in err.getvalue()
