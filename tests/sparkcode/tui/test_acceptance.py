"""Per-position speculative acceptance: from two /metrics scrapes to the status bar."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest
from textual.widgets import Static

from sparkcode.agent.core import events as ev
from sparkcode.agent.wire.metrics import MetricsDelta, parse_metrics
from sparkcode.tui import SparkcodeApp
from sparkcode.tui.scripted import ScriptedAgent, ScriptedEngine
from sparkcode.tui.stats import LiveStats, StatsTracker, format_stats

AppFactory = Callable[..., tuple[SparkcodeApp, ScriptedAgent, ScriptedEngine]]


def scrape(drafts: int, accepted: int, per_pos: list[int]) -> str:
    lines = [
        "# TYPE vllm:spec_decode_num_drafts counter",
        f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}',
        "# TYPE vllm:spec_decode_num_accepted_tokens counter",
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}',
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
    ]
    lines += [
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",'
        f'position="{i}"}} {n}'
        for i, n in enumerate(per_pos)
    ]
    return "\n".join(lines) + "\n"


def test_per_position_acceptance_is_a_delta_between_scrapes() -> None:
    delta = MetricsDelta()
    first = delta.update(parse_metrics(scrape(10, 12, [8, 3, 1])))
    assert first.acceptance_per_pos is None  # the first scrape is only a baseline
    update = delta.update(parse_metrics(scrape(30, 42, [26, 12, 4])))
    assert update.acceptance_length == pytest.approx(1 + 30 / 20)
    assert update.acceptance_per_pos == pytest.approx((0.9, 0.45, 0.15))


def test_the_status_bar_shows_each_position() -> None:
    delta = MetricsDelta()
    delta.update(parse_metrics(scrape(0, 0, [0, 0, 0])))
    stats = StatsTracker().metrics(delta.update(parse_metrics(scrape(100, 180, [95, 60, 25]))))
    text = format_stats(stats)
    assert "accept 2.80 [dim].95 .60 .25[/dim]" in text
    # Without a drafter there is no acceptance at all.
    assert "accept" not in format_stats(LiveStats())


async def test_the_app_shows_live_acceptance_per_position(app_factory: AppFactory) -> None:
    """A turn's MetricsUpdate (what the agent loop polls after each request) reaches the
    status bar of the running app, per position."""

    async def turn(agent: ScriptedAgent, text: str) -> AsyncIterator[ev.Event]:
        yield ev.TurnStarted(turn=agent.turns_run, user_text=text)
        yield ev.RequestStarted(
            request=1, reasoning_effort="low", thinking_token_budget=None, messages=2
        )
        yield ev.ContentDelta(text="done")
        yield ev.MetricsUpdate(
            acceptance_length=2.8,
            acceptance_per_pos=(0.95, 0.6, 0.25),
            prefix_cache_hit_rate=None,
            kv_cache_usage=0.1,
        )
        yield ev.TurnFinished(
            reason="stop", content="done", requests=1, prompt_tokens=10, completion_tokens=1
        )

    app, _, _ = app_factory([turn])
    async with app.run_test(size=(120, 30)) as pilot:
        app.main.prompt.value = "go"
        await pilot.press("enter")
        figures = app.main.query_one("#status-figures", Static)
        deadline = asyncio.get_running_loop().time() + 5.0
        while "accept" not in str(figures.render()):
            assert asyncio.get_running_loop().time() < deadline, str(figures.render())
            await pilot.pause(0.02)
        assert "accept 2.80 .95 .60 .25" in str(figures.render())
