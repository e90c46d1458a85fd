"""The throughput table from saved units: which steps drafted, beside acceptance."""

from __future__ import annotations

from typing import Any

from sparkcode.bench._report import columns, table


def decode(tokens: int, drafts: float, accepted: float) -> dict[str, Any]:
    return {"completion_tokens": tokens, "final_usage_completion_tokens": tokens,
            "decode_tok_s": 10.0, "ttft_s": 1.0, "idle_check": "idle", "host_load_1m": 1.0,
            "spec": {"drafts": drafts, "draft_tokens": 3 * drafts, "accepted": accepted,
                     "acceptance_length": 1 + accepted / drafts if drafts else None,
                     "per_position": [accepted / drafts, 0.0, 0.0] if drafts else None}}


def test_acceptance_length_is_shown_with_how_many_steps_drafted() -> None:
    # Measured on cpu-demo-ngram: code drafted on 27 of 56 steps, prose on 1 of 126, and
    # prose's acceptance length 2.00 is that single draft's.
    units = {"decode:code:0": decode(128, 27, 71), "decode:prose:0": decode(128, 1, 1)}
    plain = {"decode:code:0": {**decode(128, 0, 0), "spec": None},
             "decode:prose:0": {**decode(128, 0, 0), "spec": None}}
    data = {"kind": "throughput",
            "settings": {"kinds": ["code", "prose"], "prefill_lengths": [], "repeats": 1},
            "targets": [{"label": "plain"}, {"label": "ngram"}],
            "units": {"plain": plain, "ngram": units}}
    text = table(columns([data]))
    assert "| drafted steps / decode steps, code | – | 27 / 56 |" in text
    assert "| drafted steps / decode steps, prose | – | 1 / 126 |" in text
    assert "| acceptance length, prose | – | 2.00 |" in text


def test_the_acceptance_plot_names_target_prompt_and_drafted_steps() -> None:
    from sparkcode.bench._report import acceptance_series, summarize

    units = {"decode:code:0": decode(128, 27, 71), "decode:prose:0": decode(128, 1, 1)}
    data = {"kind": "throughput",
            "settings": {"kinds": ["code", "prose"], "prefill_lengths": [], "repeats": 1},
            "targets": [{"label": "ngram"}], "units": {"ngram": units}}
    cols = columns([data])
    series = acceptance_series(cols, [summarize(c) for c in cols])
    assert [name for name, _ in series] == ["ngram, code (27 / 56 steps drafted)",
                                            "ngram, prose (1 / 126 steps drafted)"]
    assert series[1][1] == [1.0, 0.0, 0.0]
