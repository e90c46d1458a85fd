"""The throughput table from saved units: which steps drafted, beside acceptance."""

from __future__ import annotations

from typing import Any

from sparkcode.bench._report import columns, table


def decode(tokens: int, drafts: float, accepted: float) -> dict[str, Any]:
    return {
        "completion_tokens": tokens,
        "final_usage_completion_tokens": tokens,
        "decode_tok_s": 10.0,
        "ttft_s": 1.0,
        "idle_check": "idle",
        "host_load_1m": 1.0,
        "spec": {
            "drafts": drafts,
            "draft_tokens": 3 * drafts,
            "accepted": accepted,
            "acceptance_length": 1 + accepted / drafts if drafts else None,
            "per_position": [accepted / drafts, 0.0, 0.0] if drafts else None,
        },
    }


def test_acceptance_length_is_shown_with_how_many_steps_drafted() -> None:
    # Measured on cpu-demo-ngram: code drafted on 27 of 56 steps, prose on 1 of 126, and
    # prose's acceptance length 2.00 is that single draft's.
    units = {"decode:code:0": decode(128, 27, 71), "decode:prose:0": decode(128, 1, 1)}
    plain = {
        "decode:code:0": {**decode(128, 0, 0), "spec": None},
        "decode:prose:0": {**decode(128, 0, 0), "spec": None},
    }
    data = {
        "kind": "throughput",
        "settings": {"kinds": ["code", "prose"], "prefill_lengths": [], "repeats": 1},
        "targets": [{"label": "plain"}, {"label": "ngram"}],
        "units": {"plain": plain, "ngram": units},
    }
    text = table(columns([data]))
    assert "| drafted steps / decode steps, code | – | 27 / 56 |" in text
    assert "| drafted steps / decode steps, prose | – | 1 / 126 |" in text
    assert "| acceptance length, prose | – | 2.00 |" in text


def test_the_acceptance_plot_names_target_prompt_and_drafted_steps() -> None:
    from sparkcode.bench._report import acceptance_series, summarize

    units = {"decode:code:0": decode(128, 27, 71), "decode:prose:0": decode(128, 1, 1)}
    data = {
        "kind": "throughput",
        "settings": {"kinds": ["code", "prose"], "prefill_lengths": [], "repeats": 1},
        "targets": [{"label": "ngram"}],
        "units": {"ngram": units},
    }
    cols = columns([data])
    series = acceptance_series(cols, [summarize(c) for c in cols])
    assert [name for name, _ in series] == [
        "ngram, code (27 / 56 steps drafted)",
        "ngram, prose (1 / 126 steps drafted)",
    ]
    assert series[1][1] == [1.0, 0.0, 0.0]


def prefill(tokens: int, ttft: float) -> dict[str, Any]:
    return {
        "prompt_tokens": tokens,
        "cached_tokens": 0,
        "ttft_s": ttft,
        "prefill_tok_s": tokens / ttft,
        "idle_check": "idle",
        "host_load_1m": 1.0,
    }


def turn(history: int, ttft: float, cached: int | None, hits: float | None) -> dict[str, Any]:
    return {
        "prompt_tokens": history + 128,
        "history_tokens": history,
        "ttft_s": ttft,
        "cached_tokens": cached,
        "prefix_cache_hits": hits,
        "idle_check": "idle",
        "host_load_1m": 1.0,
    }


def test_a_turn_on_a_cached_history_is_set_against_the_cold_prefill() -> None:
    settings = {"kinds": [], "prefill_lengths": [1024], "repeats": 2, "turn_tokens": 128}
    cached = {
        "prefill:1024:0": prefill(1024, 24.0),
        "prefill:1024:1": prefill(1024, 26.0),
        "turn:1024:0": turn(1024, 5.0, 1024, 1024.0),
        "turn:1024:1": turn(1024, 5.0, 1024, 1024.0),
    }
    # A server without prompt_tokens_details, and no cache: /metrics says 0 hits.
    off = {
        "prefill:1024:0": prefill(1024, 25.0),
        "prefill:1024:1": prefill(1024, 25.0),
        "turn:1024:0": turn(1024, 28.0, None, 0.0),
        "turn:1024:1": turn(1024, 28.0, None, 0.0),
    }
    data = {
        "kind": "throughput",
        "settings": settings,
        "targets": [{"label": "on"}, {"label": "off"}],
        "units": {"on": cached, "off": off},
    }
    text = table(columns([data]))
    assert (
        "| TTFT s, a turn of 128 tokens after 1024 | 5.000 (5.000–5.000) | "
        "28.000 (28.000–28.000) |" in text
    )
    assert "| cached tokens of that turn | 1024 1024 | 0 0 |" in text
    assert "| cold TTFT at 1024 / turn TTFT | 5.0x | 0.9x |" in text


def test_results_saved_before_turns_existed_still_render() -> None:
    data = {
        "kind": "throughput",
        "settings": {"kinds": [], "prefill_lengths": [1024], "repeats": 1},
        "targets": [{"label": "old"}],
        "units": {"old": {"prefill:1024:0": prefill(1024, 25.0)}},
    }
    text = table(columns([data]))
    assert "| TTFT s, 1024 tokens cold | 25.000 |" in text
    assert "turn" not in text
