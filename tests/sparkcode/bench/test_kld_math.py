"""The top-k KL estimate: exact when the top k hold everything, low otherwise."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from sparkcode.bench._kld import Position, compare, kl_position
from sparkcode.bench._report import columns, table
from sparkcode.bench._stats import bootstrap_ratio


def top(p: np.ndarray, k: int) -> Position:
    ids = [int(i) for i in np.argsort(-p)[:k]]
    return (0.0, ids, [float(math.log(p[i])) for i in ids])


def exact(p: np.ndarray, q: np.ndarray) -> float:
    return float(np.sum(p * np.log(p / q)))


def test_identical_distributions_give_zero() -> None:
    p = np.array([0.6, 0.25, 0.1, 0.05])
    assert kl_position(top(p, 2), top(p, 2)) == 0.0


def test_exact_when_the_top_k_cover_the_vocabulary() -> None:
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    assert math.isclose(kl_position(top(p, 3), top(q, 3)), exact(p, q), rel_tol=1e-9)


def test_the_estimate_never_exceeds_the_full_kl_on_random_pairs() -> None:
    rng = np.random.default_rng(0)
    ratios = []
    for _ in range(300):
        p = rng.dirichlet(np.full(200, rng.choice([0.05, 0.3, 1.0]))) + 1e-12
        p /= p.sum()
        q = p * np.exp(rng.normal(0, rng.choice([0.1, 0.5, 2.0]), 200))
        q /= q.sum()
        full = exact(p, q)
        estimate = kl_position(top(p, 20), top(q, 20))
        assert estimate <= full * (1 + 1e-6) + 1e-12
        ratios.append(estimate / full)
    assert np.median(ratios) > 0.3  # low, not useless


def test_compare_counts_top1_agreement_and_bootstrap_brackets_the_mean() -> None:
    p, q = np.array([0.7, 0.2, 0.1]), np.array([0.1, 0.2, 0.7])
    same, flipped = top(p, 3), top(q, 3)
    out = compare([same, same, same, same], [same, flipped, same, flipped])
    assert out["n"] == 4 and out["top1_agree"] == 2
    assert math.isclose(out["kl_sum"], 2 * exact(p, q), rel_tol=1e-5)
    ci = bootstrap_ratio([0.1, 0.5, 0.2, 0.9], [10, 10, 10, 10])
    assert ci is not None and ci[0] <= 1.7 / 40 <= ci[1]


def test_the_table_splits_kld_and_perplexity_by_text_set() -> None:
    p, q = np.array([0.7, 0.2, 0.1]), np.array([0.1, 0.2, 0.7])
    same, flipped = top(p, 3), top(q, 3)

    def cmp(a: list[Position], b: list[Position]) -> dict[str, Any]:
        return {**compare(a, b), "top_k": 3}

    def nll(n: int, value: float) -> dict[str, Any]:
        return {"n": n, "nll_sum": n * value, "top_k": 3, "coverage_sum": float(n)}

    ref_units = {
        "a:code:0": nll(2, 1.0),
        "a:prose:0": nll(2, 2.0),
        "floor:code:0": cmp([same] * 2, [same] * 2),
        "floor:prose:0": cmp([same] * 2, [same] * 2),
    }
    units = {
        "a:code:0": nll(2, 1.0),
        "a:prose:0": nll(2, 3.0),
        "cmp:code:0": cmp([same] * 2, [same] * 2),  # code: identical
        "cmp:prose:0": cmp([same] * 2, [flipped] * 2),
    }  # prose: far apart
    data = {
        "kind": "kld",
        "settings": {"texts": ["code", "prose"]},
        "targets": [{"label": "ref"}, {"label": "other"}],
        "units": {"ref": ref_units, "other": units},
    }
    text = table(columns([data]))
    assert f"| perplexity, prose | {math.exp(2):.3f} | {math.exp(3):.3f} |" in text
    assert "| KLD vs reference, code | – | 0.0000 |" in text
    assert f"| KLD vs reference, prose | – | {exact(p, q):.4f} |" in text
    assert f"| KLD vs reference, nats/token | – | {exact(p, q) / 2:.4f}" in text
    assert "| KLD noise floor, code | 0.0000 | – |" in text


def test_the_kl_histogram_bins_span_zeros_and_the_largest_value() -> None:
    from sparkcode.bench._report import KL_FLOOR, kl_bins

    edges = kl_bins([0.0, 0.0, 2e-4, 0.003, 0.7])
    assert edges[0] == KL_FLOOR and edges[-1] > 0.7 and len(edges) == 41
    assert all(b > a for a, b in zip(edges, edges[1:], strict=False))
    # Log-spaced: every bin spans the same ratio, so 2e-4 and 0.003 fall in different bins.
    assert math.isclose(edges[1] / edges[0], edges[-1] / edges[-2])
    assert sum(1 for a, b in zip(edges, edges[1:], strict=False) if a <= 2e-4 < b) == 1
    assert not any(a <= 2e-4 < b and a <= 0.003 < b for a, b in zip(edges, edges[1:], strict=False))
    assert kl_bins([0.0])[-1] > KL_FLOOR  # a floor of zeros alone still gets a range
