"""The stream-silence limit: ``[agent] stream_idle_timeout_s``, its default rule from the
measured prefill rate, and the error of a server that stays silent past it."""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

import pytest

from engine.profiles import AgentKnobs
from sparkcode.agent import ChatClient
from sparkcode.agent.core.events import AgentError
from sparkcode.agent.wire.stream_idle import (
    DEFAULT_IDLE_S,
    MIN_MEASURED,
    SAFETY,
    PrefillRate,
    idle_timeout_s,
    measured_prefill,
)
from sparkcode.cli._run import EXIT_ERROR, EXIT_OK, RunRequest, run_headless
from sparkcode.start import SessionOptions
from tests.sparkcode.agent.core.test_loop import make_agent, of, run
from tests.support.http_server import serve, url
from tests.support.scripted import Reply, ScriptedServer


def test_without_a_measured_rate_the_limit_is_600_s() -> None:
    assert idle_timeout_s(None, None, 50_000) == DEFAULT_IDLE_S == 600.0


def test_the_limit_follows_the_rate_and_the_tokens_to_prefill() -> None:
    # The slowest CPU profile: 5.8 tok/s; 3.5k tokens fill 600 s, 10k need more.
    assert idle_timeout_s(None, 5.8, 1000) == 600.0
    assert idle_timeout_s(None, 5.8, 10_000) == pytest.approx(10_000 / 5.8 * SAFETY)
    assert idle_timeout_s(None, 5.8, 20_000) > idle_timeout_s(None, 5.8, 10_000)
    assert idle_timeout_s(None, 2000.0, 100_000) == 600.0  # a fast engine: the floor


def test_a_value_the_user_set_always_wins() -> None:
    assert idle_timeout_s(30.0, 5.8, 100_000) == 30.0
    assert idle_timeout_s(5000.0, None, 0) == 5000.0


def test_only_requests_that_prefilled_enough_tokens_are_measured() -> None:
    assert measured_prefill(MIN_MEASURED - 1, None, 1.0) is None
    assert measured_prefill(5000, 4900, 1.0) is None  # mostly cached
    assert measured_prefill(5000, 1000, 2.0) == 2000.0  # the uncached tokens count
    assert measured_prefill(5000, None, None) is None
    rate = PrefillRate()
    rate.observe(1000, None, 4.0)
    rate.observe(100, None, 0.001)  # too short to say anything: kept
    assert rate.tok_s == 250.0


def test_the_knob_is_refused_unless_positive() -> None:
    from engine.errors import UserError
    from engine.profiles._knobs import knobs_from

    with pytest.raises(UserError, match="stream_idle_timeout_s"):
        knobs_from({"stream_idle_timeout_s": 0}, "config.toml [agent]")


async def test_each_request_gets_the_limit_of_the_rule(workspace: Path) -> None:
    server = ScriptedServer([Reply(content=["one"]), Reply(content=["two"])])
    agent = make_agent(server, workspace)
    seen: list[float | None] = []
    opened = agent.client.stream_chat

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("idle_timeout_s"))
        return opened(*args, **kwargs)

    agent.client.stream_chat = spy  # type: ignore[method-assign]
    await run(agent, "hello")
    assert seen == [DEFAULT_IDLE_S]  # nothing measured before the first request
    agent.client.prefill.tok_s = 1.0  # as if the engine had prefilled 1 token a second
    before = agent.context.estimate(agent.history)
    await run(agent, "x" * 1200)  # about 300 tokens more: 2 x (their sum) s at 1 tok/s
    limit = seen[1]
    assert limit is not None and DEFAULT_IDLE_S < limit
    assert SAFETY * (before + 250) < limit <= SAFETY * agent.context.estimate(agent.history)


async def test_a_long_prompt_measures_the_rate_on_the_client(workspace: Path) -> None:
    server = ScriptedServer([Reply(content=["ok"])])
    client = ChatClient("http://engine.test/v1", "m", transport=server.transport())
    assert client.prefill.tok_s is None
    async with client.stream_chat([{"role": "user", "content": "word " * 1000}]) as stream:
        async for _ in stream:
            pass
    assert client.prefill.tok_s is not None and client.prefill.tok_s > 0
    assert client.for_task("c1").prefill is client.prefill  # a task's requests share it


async def test_a_silent_server_fails_the_turn_naming_the_setting(workspace: Path) -> None:
    with serve([Reply(content=["late"], silence_s=3.0)]) as server:
        agent = make_agent(ScriptedServer([]), workspace, stream_idle_timeout_s=0.5)
        agent.client = ChatClient(url(server), "scripted")
        started = time.monotonic()
        events = await run(agent, "hello")
        waited = time.monotonic() - started
    errors = of(events, AgentError)
    assert len(errors) == 1 and errors[0].code == "stream_silent"
    assert "[agent] stream_idle_timeout_s" in errors[0].message
    assert "sent nothing for 0.5 s" in errors[0].message
    assert waited < 2.5  # cut at the limit, not when the server spoke


async def test_sparkcode_run_reports_the_silence_and_a_longer_limit_waits(workspace: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    with serve([Reply(content=["late"], silence_s=1.5)]) as server:
        code = await run_headless(
            RunRequest(
                prompt="hi",
                workspace=workspace,
                endpoint=url(server),
                session=SessionOptions(record=False, knobs=AgentKnobs(stream_idle_timeout_s=0.3)),
            ),
            out=out,
            err=err,
        )
    assert code == EXIT_ERROR
    assert "sent nothing for 0.3 s" in err.getvalue()
    assert "[agent] stream_idle_timeout_s" in err.getvalue()
    out, err = io.StringIO(), io.StringIO()
    with serve([Reply(content=["late"], silence_s=1.5)]) as server:
        code = await run_headless(
            RunRequest(
                prompt="hi",
                workspace=workspace,
                endpoint=url(server),
                session=SessionOptions(record=False, knobs=AgentKnobs(stream_idle_timeout_s=5)),
            ),
            out=out,
            err=err,
        )
    assert code == EXIT_OK and "late" in out.getvalue(), err.getvalue()
