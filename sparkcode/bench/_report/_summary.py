"""Per-target summaries recomputed from a column's raw units: pass rates, decode
and prefill spreads, loop patterns, KL divergence."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

from .._kld import summarize_pairs
from .._stats import spread
from ._columns import Column


def summarize(col: Column) -> dict[str, Any]:
    kind = col.data["kind"]
    if kind == "agent":
        from .. import _agent_report

        return _agent_report.summarize(col)
    return {"humaneval": _humaneval, "throughput": _throughput, "loops": _loops, "kld": _kld}[kind](
        col
    )


def _humaneval(col: Column) -> dict[str, Any]:
    units = col.units
    n = len(units)
    passed = sum(1 for u in units.values() if u["passed"])
    out: dict[str, Any] = {
        "problems": n,
        "passed": passed,
        "pass_at_1": passed / n if n else None,
        "empty_answers": sum(1 for u in units.values() if not u["content"].strip()),
        "cut_at_max_tokens": sum(1 for u in units.values() if u["finish_reason"] == "length"),
        "completion_tokens": spread([u["completion_tokens"] for u in units.values()]),
        "extraction": dict(Counter(u["extraction"] for u in units.values())),
        "outcomes": dict(Counter(u["base"]["status"] for u in units.values())),
    }
    if any("passed_plus" in u for u in units.values()):
        plus = sum(1 for u in units.values() if u.get("passed_plus"))
        out.update(passed_plus=plus, pass_at_1_plus=plus / n if n else None)
    return out


def _throughput(col: Column) -> dict[str, Any]:
    units = col.units
    out: dict[str, Any] = {"decode": {}, "prefill": {}}
    consistent = True
    for key, u in units.items():
        if key.startswith("decode:"):
            consistent &= u["completion_tokens"] == u["final_usage_completion_tokens"]
    for kind in col.data["settings"]["kinds"]:
        runs = [u for k, u in units.items() if k.startswith(f"decode:{kind}:")]
        if not runs:
            continue
        specs = [u["spec"] for u in runs if u.get("spec") and u["spec"]["drafts"]]
        per_pos = [s["per_position"] for s in specs if s.get("per_position")]
        out["decode"][kind] = {
            "tok_s": spread([u["decode_tok_s"] for u in runs]),
            "ttft_s": spread([u["ttft_s"] for u in runs]),
            "tokens": spread([u["completion_tokens"] for u in runs]),
            "acceptance_length": spread([s["acceptance_length"] for s in specs]) if specs else None,
            "acceptance_per_position": [
                sum(p[i] for p in per_pos) / len(per_pos) for i in range(len(per_pos[0]))
            ]
            if per_pos
            else None,
            "drafted_steps": spread([u["spec"]["drafts"] for u in runs if u.get("spec")]),
            "decode_steps": spread([decode_steps(u) for u in runs]),
        }
    for length in col.data["settings"]["prefill_lengths"]:
        runs = [u for k, u in units.items() if k.startswith(f"prefill:{length}:")]
        if runs:
            out["prefill"][str(length)] = {
                "tok_s": spread([u["prefill_tok_s"] for u in runs]),
                "ttft_s": spread([u["ttft_s"] for u in runs]),
                "cached_tokens": [u["cached_tokens"] for u in runs],
            }
    out["turn"] = _turns(col, out["prefill"])
    out["usage_consistent"] = consistent
    out["host_load_1m"] = spread([u.get("host_load_1m") for u in units.values()])
    out["idle_checks"] = dict(Counter(u["idle_check"] for u in units.values()))
    return out


def _turns(col: Column, prefill: dict[str, Any]) -> dict[str, Any]:
    """Per history length: the turn's TTFT, what the cache held, and cold TTFT at the
    history's length over it (how many times cheaper the cache made the turn)."""
    out: dict[str, Any] = {}
    turn = col.data["settings"].get("turn_tokens") or 0
    for length in col.data["settings"]["prefill_lengths"] if turn else []:
        runs = [u for k, u in col.units.items() if k.startswith(f"turn:{length}:")]
        if not runs:
            continue
        ttft = spread([u["ttft_s"] for u in runs])
        cold = (prefill.get(str(length)) or {}).get("ttft_s") or {}
        cached = [
            u["cached_tokens"] if u["cached_tokens"] is not None else u["prefix_cache_hits"]
            for u in runs
        ]
        out[str(length)] = {
            "ttft_s": ttft,
            "turn_tokens": turn,
            "history_tokens": runs[0]["history_tokens"],
            "cached_tokens": cached,
            # What the engine computed again: the prompt less its cache hit.
            "reprefilled_tokens": [
                None if c is None else u["prompt_tokens"] - c
                for u, c in zip(runs, cached, strict=True)
            ],
            "cold_over_turn": cold["median"] / ttft["median"]
            if cold.get("median") and ttft["median"]
            else None,
        }
    return out


def decode_steps(unit: dict[str, Any]) -> float | None:
    """Engine steps after the first token: each emits one token plus the draft tokens
    it accepted, so steps = tokens − 1 − accepted (exact from usage and /metrics; a
    drafter such as n-gram proposes only on some steps, and acceptance length counts
    those alone)."""
    spec = unit.get("spec")
    if not spec or unit.get("completion_tokens") is None:
        return None
    return float(unit["completion_tokens"] - 1 - spec["accepted"])


def _loops(col: Column) -> dict[str, Any]:
    units = col.units
    bad = [u for u in units.values() if u["degenerate"]]
    return {
        "samples": len(units),
        "degenerate": len(bad),
        "patterns": dict(Counter(u["pattern"] for u in bad)),
        "sessions": [u["session"] for u in bad],
        "completion_tokens": spread([u["completion_tokens"] for u in units.values()]),
        "decode_tok_s": spread([u["decode_tok_s"] for u in units.values()]),
    }


def _kld_of(units: dict[str, Any], text: str = "") -> dict[str, Any]:
    """Perplexity, coverage and both comparisons over the units of one text set
    (``text`` empty: all of them)."""
    tag = f"{text}:" if text else ""
    mine = [u for k, u in units.items() if k.startswith("a:" + tag)]
    n = sum(u["n"] for u in mine)
    return {
        "positions": n,
        "perplexity": math.exp(sum(u["nll_sum"] for u in mine) / n) if n else None,
        "top_k": min((u["top_k"] for u in mine), default=None),
        "topk_coverage": sum(u["coverage_sum"] for u in mine) / n if n else None,
        "vs_reference": summarize_pairs(units, "cmp" + (":" + text if text else "")),
        "noise_floor": summarize_pairs(units, "floor" + (":" + text if text else "")),
    }


def kld_texts(data: dict[str, Any]) -> list[str]:
    """The text sets' names as they appear in unit keys (``code``, ``prose``, a file name)."""
    return [Path(t).name for t in data["settings"]["texts"]]


def _kld(col: Column) -> dict[str, Any]:
    out = {"reference": col.data["targets"][0]["label"], **_kld_of(col.units)}
    texts = kld_texts(col.data)
    if len(texts) > 1:
        out["by_text"] = {t: _kld_of(col.units, t) for t in texts}
    return out
