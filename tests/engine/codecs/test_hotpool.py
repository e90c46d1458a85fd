"""FP4 hot-expert pool: sizing, greedy selection within the budget, coverage, hysteresis."""

from __future__ import annotations

import pytest
import torch

from engine.codecs.hotpool import (
    GLM53_EXPERT_FP4_BYTES,
    GiB,
    HotPoolSelector,
    coverage,
    expert_fp4_bytes,
    select_pool,
)
from engine.codecs.nvfp4 import matrix_fp4_bytes

LAYERS, EXPERTS, SIZE = 4, 64, 100


def zipf_counts(seed: int, total: float = 20_000.0) -> torch.Tensor:
    """Skewed routing rates over (layer, expert), hottest experts scattered across layers."""
    g = torch.Generator().manual_seed(seed)
    rank = torch.randperm(LAYERS * EXPERTS, generator=g).float()
    rates = (1.0 / (1.0 + rank) ** 0.8).reshape(LAYERS, EXPERTS)
    return rates / rates.sum() * total


def test_expert_size_counts_three_matrices_with_scales() -> None:
    per_matrix = 2048 * 4096 // 2 + 2048 * 4096 // 16 + 4
    assert matrix_fp4_bytes(2048, 4096) == per_matrix
    assert expert_fp4_bytes(2048, 4096) == 3 * per_matrix == GLM53_EXPERT_FP4_BYTES
    # About 151 GLM-5.3-Flash experts fit the default 2 GiB pool.
    assert 2 * GiB // GLM53_EXPERT_FP4_BYTES == 151


def test_select_pool_takes_the_most_routed_within_budget() -> None:
    counts = zipf_counts(0)
    sel = select_pool(counts, SIZE, budget_bytes=10 * SIZE + 50)
    assert len(sel) == 10
    top = torch.topk(counts.reshape(-1), 10).indices.tolist()
    assert sel == {(i // EXPERTS, i % EXPERTS) for i in top}


def test_select_pool_with_sizes_is_greedy_by_tokens_per_byte() -> None:
    counts = torch.tensor([[100.0, 90.0, 10.0, 0.0]])
    sizes = torch.tensor([[100, 30, 10, 1]])
    sel = select_pool(counts, sizes, budget_bytes=45)
    # Densities 1, 3, 1, 0: take (0,1) (30 bytes), (0,2) fits (10), (0,0) does not; never (0,3).
    assert sel == {(0, 1), (0, 2)}
    assert sum(int(sizes[p]) for p in sel) <= 45


def test_select_pool_skips_unrouted_experts_and_empty_budget() -> None:
    counts = torch.zeros(2, 8)
    counts[1, 3] = 5
    assert select_pool(counts, SIZE, budget_bytes=100 * SIZE) == {(1, 3)}
    assert select_pool(counts, SIZE, budget_bytes=SIZE - 1) == set()


def test_coverage_is_the_share_of_routed_tokens() -> None:
    counts = torch.tensor([[6.0, 2.0], [1.0, 1.0]])
    assert coverage({(0, 0)}, counts) == pytest.approx(0.6)
    assert coverage({(0, 0), (1, 1)}, counts) == pytest.approx(0.7)
    assert coverage(set(), counts) == 0.0
    assert coverage({(0, 0)}, torch.zeros(2, 2)) == 0.0


def test_bad_inputs_are_rejected() -> None:
    with pytest.raises(ValueError, match=r"\[layers, experts\]"):
        select_pool(torch.ones(5), SIZE)
    with pytest.raises(ValueError, match="non-negative"):
        select_pool(-torch.ones(2, 2), SIZE)
    with pytest.raises(ValueError, match="positive"):
        select_pool(torch.ones(2, 2), 0)
    with pytest.raises(ValueError, match="decay"):
        HotPoolSelector(decay=0.0)
    sel = HotPoolSelector(budget_bytes=10 * SIZE, expert_bytes=SIZE)
    sel.observe(torch.ones(2, 2))
    with pytest.raises(ValueError, match="differs"):
        sel.observe(torch.ones(3, 2))


def plateau_counts() -> torch.Tensor:
    """Zipf rates with 20 equally hot experts straddling the pool boundary (ranks 30-49)."""
    rates = zipf_counts(1)
    flat = rates.reshape(-1)
    order = torch.argsort(flat, descending=True)
    flat[order[30:50]] = float(flat[order[40]])
    return flat.reshape(LAYERS, EXPERTS)


def run_stationary(hysteresis: float, steps: int = 60, warmup: int = 10) -> tuple[int, float]:
    """Swaps after warm-up on noisy counts around fixed rates; coverage at the end."""
    g = torch.Generator().manual_seed(1)
    rates = plateau_counts()
    sel = HotPoolSelector(budget_bytes=40 * SIZE, expert_bytes=SIZE, hysteresis=hysteresis)
    swaps = 0
    for step in range(steps):
        sel.observe(torch.poisson(rates, generator=g))
        change = sel.reselect()
        assert sel.used_bytes <= 40 * SIZE
        if step >= warmup:
            swaps += len(change.add)
    return swaps, coverage(sel.resident, rates)


def test_hysteresis_stops_thrashing_on_stationary_noise() -> None:
    calm, calm_cov = run_stationary(0.1)
    jumpy, _ = run_stationary(0.0)
    rates = plateau_counts()
    optimum = coverage(select_pool(rates, SIZE, 40 * SIZE), rates)
    assert calm <= 3
    assert jumpy >= calm + 20  # without a margin, near-ties at the boundary flip back and forth
    assert calm_cov >= 0.99 * optimum


def test_selector_follows_a_real_shift() -> None:
    g = torch.Generator().manual_seed(2)
    before = zipf_counts(2)
    after = zipf_counts(3)  # a different set of hot experts
    sel = HotPoolSelector(budget_bytes=40 * SIZE, expert_bytes=SIZE, hysteresis=0.1)
    for _ in range(20):
        sel.observe(torch.poisson(before, generator=g))
        sel.reselect()
    resident_before = sel.resident
    best_after = coverage(select_pool(after, SIZE, 40 * SIZE), after)
    assert coverage(resident_before, after) < 0.8 * best_after
    added: set[tuple[int, int]] = set()
    for _ in range(30):
        sel.observe(torch.poisson(after, generator=g))
        change = sel.reselect()
        assert not (change.add & change.remove)
        added |= change.add
    assert coverage(sel.resident, after) >= 0.97 * best_after
    assert sel.coverage == pytest.approx(coverage(sel.resident, sel.scores))  # type: ignore[arg-type]
    assert len(sel.resident) == 40 and added


def test_pool_change_matches_resident_set_and_max_swaps() -> None:
    sel = HotPoolSelector(budget_bytes=8 * SIZE, expert_bytes=SIZE, hysteresis=0.0, max_swaps=2)
    first = torch.zeros(1, 16)
    first[0, :8] = 10.0
    sel.observe(first)
    change = sel.reselect()
    assert change.add == {(0, e) for e in range(8)} and not change.remove
    second = torch.zeros(1, 16)
    second[0, 8:] = 1000.0
    sel.observe(second)
    before = sel.resident
    change = sel.reselect()
    assert len(change.add) == 2 and len(change.remove) == 2  # capped by max_swaps
    assert sel.resident == (before - change.remove) | change.add
    assert not HotPoolSelector().reselect()  # nothing observed yet: no change
