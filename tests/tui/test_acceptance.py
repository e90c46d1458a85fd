"""Per-position speculative acceptance: from two /metrics scrapes to the status bar."""

from __future__ import annotations

import pytest

from sparkcode.agent.metrics import MetricsDelta, parse_metrics
from sparkcode.tui.stats import LiveStats, StatsTracker, format_stats


def scrape(drafts: int, accepted: int, per_pos: list[int]) -> str:
    lines = ["# TYPE vllm:spec_decode_num_drafts counter",
             f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}',
             "# TYPE vllm:spec_decode_num_accepted_tokens counter",
             f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} '
             f"{accepted}",
             "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter"]
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",'
              f'position="{i}"}} {n}' for i, n in enumerate(per_pos)]
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
