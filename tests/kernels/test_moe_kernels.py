"""The fused W2 MoE kernels against their PyTorch reference, and the routing alignment.

Kernels run in Triton's interpreter in a child process on a CPU (the pattern and the reason:
``tests/kernels/test_kernels.py``), on a GPU in this process. Cases: pooled and W2
experts mixed in one batch, empty experts, one token, 64 pairs (the decode path's most),
64 tokens and other prefill sizes (the aligned path), a skewed batch where one expert gets
every token, a batch whose tokens repeat one expert (more pairs than a decode tile's rows),
the SwiGLU clamp on and off, the router weight on the input, no pool at all, zero scales;
K steps of 128 (one 32-bit scale word per row) and shorter ones (a part of a word).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from typing import Any

import pytest
import torch

from kernels import _triton
from kernels.moe_align import max_padded, moe_align
from kernels.w2_moe_layout import w2_moe_reference
from tests.support import ROOT
from tests.support.moe_layers import random_moe_weights

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
if _triton.HAVE_TRITON:
    from kernels import w2_moe

    RUNS_HERE = w2_moe.kernels_launchable(DEVICE)
else:  # pragma: no cover - depends on the environment
    RUNS_HERE = False
needs_triton = pytest.mark.skipif(not RUNS_HERE, reason="Triton cannot run kernels here")


@pytest.mark.skipif(
    RUNS_HERE or not _triton.HAVE_TRITON or torch.cuda.is_available(),
    reason="kernels run in this process",
)
def test_moe_kernels_in_an_interpreting_child_process() -> None:
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    summary = proc.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "1 skipped" in summary, summary  # only this launcher


def test_alignment_matches_vllms_documented_example() -> None:
    # vLLM's moe_align_block_size docstring: 12 pairs, block 4, experts 1..4 (0 is empty).
    ids = torch.tensor([[2, 3, 4], [1, 2, 4], [1, 3, 4], [1, 2, 3]])
    sorted_ids, block_expert, num_padded = moe_align(ids, 5, 4)
    assert sorted_ids.shape == (max_padded(12, 5, 4),) == (28,)
    assert sorted_ids[:16].tolist() == [3, 6, 9, 12, 0, 4, 10, 12, 1, 7, 11, 12, 2, 5, 8, 12]
    assert set(sorted_ids[16:].tolist()) == {12}
    assert block_expert.tolist() == [1, 2, 3, 4, -1, -1, -1]
    assert num_padded.tolist() == [16]


@pytest.mark.parametrize(
    ("tokens", "top_k", "experts", "block"), [(1, 8, 288, 16), (300, 8, 32, 64)]
)
def test_alignment_groups_every_pair_once_by_expert(
    tokens: int, top_k: int, experts: int, block: int
) -> None:
    g = torch.Generator().manual_seed(tokens)
    ids = torch.stack([torch.randperm(experts, generator=g)[:top_k] for _ in range(tokens)])
    n = tokens * top_k
    sorted_ids, block_expert, num_padded = moe_align(ids.to(torch.int32), experts, block)
    used = int(num_padded)
    flat = ids.reshape(-1)
    pairs = sorted_ids[:used]
    assert sorted(pairs[pairs < n].tolist()) == list(range(n))
    for b in range(used // block):
        chunk = pairs[b * block : (b + 1) * block]
        real = chunk[chunk < n]
        assert len(real) > 0 and (flat[real] == block_expert[b]).all()
        assert real.tolist() == sorted(real.tolist())  # stable within an expert
    assert (block_expert[used // block :] == -1).all()


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bits of a float tensor (``torch.equal`` on floats would call -0 and +0 equal)."""
    return t.view({4: torch.int32, 2: torch.int16}[t.element_size()])


def _case(
    tokens: int, top_k: int, experts: int, seed: int, ids_mode: str = "random"
) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    if ids_mode == "skewed":  # every token on experts 0..top_k-1
        ids = torch.arange(top_k).repeat(tokens, 1)
    elif ids_mode == "repeat":  # every pair on expert 1
        ids = torch.ones(tokens, top_k, dtype=torch.int64)
    else:
        ids = torch.stack([torch.randperm(experts, generator=g)[:top_k] for _ in range(tokens)])
    wts = torch.rand(tokens, top_k, generator=g)
    return ids.to(torch.int32), wts


@needs_triton
@pytest.mark.parametrize(
    (
        "tokens",
        "top_k",
        "experts",
        "hidden",
        "inter",
        "pooled",
        "limit",
        "on_input",
        "ids_mode",
        "block_n",
    ),
    [
        # GLM-shaped (scaled down): one decode token, top-8, clamp 10, pooled and W2 mixed;
        # K steps of 128 in both kernels.
        (1, 8, 32, 256, 128, (0, 5, 9, 31), 10.0, False, "random", None),
        # A k=7 verify step: 8 tokens x top-8 = 64 pairs, the decode path's most.
        (8, 8, 32, 128, 64, (1, 2, 3, 7, 20), 10.0, False, "random", 64),
        # 64 tokens x top-8 (512 pairs, aligned path), GLM's clamp, small widths.
        (64, 8, 32, 64, 32, (0, 13, 31), 10.0, False, "random", 32),
        # Prefill (aligned path); 16 experts, top-4: some experts get no token.
        (40, 4, 16, 128, 64, (2, 11), 10.0, False, "random", 64),
        # Every token on the same experts: several blocks of one expert.
        (24, 2, 8, 64, 64, (1,), None, False, "skewed", 64),
        # Router weight on the input (top-1), no clamp, no pool.
        (5, 1, 8, 64, 32, (), None, True, "random", 32),
        # Decode path, 24 pairs on one expert: two chunks of a 16-row tile (pooled and not).
        (6, 4, 8, 128, 64, (1,), None, False, "repeat", None),
        (6, 4, 8, 128, 64, (), None, False, "repeat", None),
    ],
)
def test_fused_moe_matches_the_reference(
    tokens: int,
    top_k: int,
    experts: int,
    hidden: int,
    inter: int,
    pooled: tuple[int, ...],
    limit: float | None,
    on_input: bool,
    ids_mode: str,
    block_n: int | None,
) -> None:
    w = random_moe_weights(experts, hidden, inter, pooled, seed=tokens, device=DEVICE)
    # Some zero scales (ue5m3 byte 0 is exactly 0): whole groups of a row weigh nothing.
    w.w13_scale[:, 3, 1] = 0
    w.w13_scale[:, inter + 5, 0] = 0
    w.w2_scale[:, 2, -1] = 0
    ids, wts = _case(tokens, top_k, experts, seed=tokens, ids_mode=ids_mode)
    x = torch.randn(tokens, hidden, generator=torch.Generator().manual_seed(1)) * 4
    x, ids, wts = x.to(DEVICE), ids.to(DEVICE), wts.to(DEVICE)
    n = tokens * top_k
    cfg = w2_moe.tile_config(n, top_k)
    if block_n is not None:
        cfg = dataclasses.replace(cfg, block_n=block_n)
    assert cfg.aligned == (n > w2_moe.DECODE_MAX_PAIRS)
    assert ids_mode != "repeat" or cfg.block_m < n  # the chunk loop runs
    want_counts = torch.zeros(experts, dtype=torch.int64, device=DEVICE)
    got_counts = torch.zeros_like(want_counts)
    want = w2_moe_reference(x, wts, ids, w, limit, on_input, want_counts)
    got = w2_moe.w2_fused_moe(x, wts, ids, w, limit, on_input, got_counts, config=cfg)
    scale = float(want.abs().max())
    assert scale > 0.1
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5 * scale)
    assert torch.equal(got_counts, want_counts)
    assert int(want_counts.sum()) == n
    if ids_mode != "random":
        # A second run (decode and aligned paths, W2 and FP4 experts): bit-identical (no
        # float atomics, fixed summation order), counters keep adding.
        again = w2_moe.w2_fused_moe(x, wts, ids, w, limit, on_input, got_counts, config=cfg)
        assert torch.equal(_bits(again), _bits(got))
        assert torch.equal(got_counts, 2 * want_counts)
    if limit is not None:  # the clamp bites at these activations
        loose = w2_moe_reference(x, wts, ids, w, None, on_input)
        assert (loose - want).abs().max() > 1e-2 * scale


@needs_triton
def test_pooled_experts_are_read_from_their_slots() -> None:
    # The same W2 codes with and without a pool: only the pooled expert's rows change.
    plain = random_moe_weights(8, 64, 32, (), seed=3, device=DEVICE)
    pooled = random_moe_weights(8, 64, 32, (4,), seed=3, device=DEVICE)
    x = torch.randn(2, 64, generator=torch.Generator().manual_seed(2)).to(DEVICE)
    ids = torch.tensor([[4], [6]], dtype=torch.int32, device=DEVICE)
    wts = torch.ones(2, 1, device=DEVICE)
    a = w2_moe.w2_fused_moe(x, wts, ids, plain)
    b = w2_moe.w2_fused_moe(x, wts, ids, pooled)
    assert torch.equal(a[1], b[1])
    assert not torch.allclose(a[0], b[0])
    torch.testing.assert_close(b, w2_moe_reference(x, wts, ids, pooled), rtol=1e-4, atol=1e-5)


def test_the_entry_point_refuses_mismatched_inputs() -> None:
    from kernels.w2_moe import w2_fused_moe

    w = random_moe_weights(4, 64, 32)
    with pytest.raises(ValueError, match=r"x must be \[tokens, 64\]"):
        w2_fused_moe(torch.zeros(2, 32), torch.ones(2, 1), torch.zeros(2, 1, dtype=torch.int32), w)
    with pytest.raises(ValueError, match="must both be"):
        w2_fused_moe(torch.zeros(2, 64), torch.ones(2, 2), torch.zeros(2, 1, dtype=torch.int32), w)


def test_an_empty_batch_gives_an_empty_output() -> None:
    from kernels.w2_moe import w2_fused_moe

    w = random_moe_weights(4, 64, 32, (1,), device=DEVICE)
    counts = torch.zeros(4, dtype=torch.int64, device=DEVICE)
    out = w2_fused_moe(
        torch.zeros(0, 64, device=DEVICE),
        torch.ones(0, 2, device=DEVICE),
        torch.zeros(0, 2, dtype=torch.int32, device=DEVICE),
        w,
        10.0,
        False,
        counts,
    )
    assert out.shape == (0, 64) and int(counts.sum()) == 0


def test_alignment_leaves_other_ranks_pairs_past_the_padded_end() -> None:
    # Expert parallelism: -1 marks another rank's expert; those pairs are served by no block.
    ids = torch.tensor([[0, -1], [-1, 2], [2, -1]], dtype=torch.int32)
    sorted_ids, block_expert, num_padded = moe_align(ids, 3, 4, skip_unmapped=True)
    used = int(num_padded)
    assert used == 8
    assert sorted_ids[:used].tolist() == [0, 6, 6, 6, 3, 4, 6, 6]
    assert block_expert[:2].tolist() == [0, 2]
    assert sorted(sorted_ids[used:][sorted_ids[used:] < 6].tolist()) == [1, 2, 5]


def _ep_split(w: Any, rank: int) -> tuple[Any, torch.Tensor]:
    """Rank ``rank`` of 2 under expert parallelism: its half of the experts (linear placement,
    pool slots renumbered) and vLLM's ``expert_map`` (global id -> local id or -1)."""
    from kernels.w2_moe_layout import MoEWeights

    e = w.num_experts
    own = torch.arange(rank * e // 2, (rank + 1) * e // 2, device=w.expert_slot.device)
    expert_map = torch.full((e,), -1, dtype=torch.int32, device=own.device)
    expert_map[own] = torch.arange(e // 2, dtype=torch.int32, device=own.device)
    slot = w.expert_slot[own]
    keep = slot[slot >= 0].to(torch.int64)
    renum = torch.full_like(slot, -1)
    renum[slot >= 0] = torch.arange(int(keep.numel()), dtype=torch.int32, device=own.device)
    local = MoEWeights(
        w.w13_packed[own],
        w.w13_scale[own],
        w.w2_packed[own],
        w.w2_scale[own],
        renum,
        w.w13_fp4[keep],
        w.w13_fp4_scale[keep],
        w.w13_fp4_global[keep],
        w.w2_fp4[keep],
        w.w2_fp4_scale[keep],
        w.w2_fp4_global[keep],
    )
    return local, expert_map


@needs_triton
@pytest.mark.parametrize(
    ("tokens", "top_k", "experts", "ids_mode"),
    [
        (2, 4, 16, "random"),  # decode: one program per pair, other ranks' pairs exit
        (8, 8, 16, "random"),  # a k=7 verify step, 64 pairs
        (24, 4, 16, "random"),  # prefill (aligned path): other ranks' pairs sort past the end
        (20, 4, 16, "skewed"),  # every token on rank 0's experts: rank 1 outputs exact zeros
    ],
)
def test_expert_parallel_ranks_sum_to_the_whole_layer(
    tokens: int, top_k: int, experts: int, ids_mode: str
) -> None:
    w = random_moe_weights(experts, 128, 64, (3, 9, 12), seed=tokens, device=DEVICE)
    ids, wts = _case(tokens, top_k, experts, seed=tokens, ids_mode=ids_mode)
    x = torch.randn(tokens, 128, generator=torch.Generator().manual_seed(7)) * 4
    x, ids, wts = x.to(DEVICE), ids.to(DEVICE), wts.to(DEVICE)
    whole = w2_moe_reference(x, wts, ids, w, 10.0)
    partial = []
    for rank in (0, 1):
        local, expert_map = _ep_split(w, rank)
        counts = torch.zeros(experts // 2, dtype=torch.int64, device=DEVICE)
        want_counts = torch.zeros_like(counts)
        got = w2_moe.w2_fused_moe(x, wts, ids, local, 10.0, False, counts, expert_map=expert_map)
        want = w2_moe_reference(x, wts, expert_map[ids.long()], local, 10.0, False, want_counts)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5 * float(whole.abs().max()))
        assert torch.equal(counts, want_counts)
        own = slice(rank * experts // 2, (rank + 1) * experts // 2)
        assert int(counts.sum()) == int(((ids >= own.start) & (ids < own.stop)).sum())
        partial.append(got)
    if ids_mode == "skewed":
        assert torch.equal(partial[1], torch.zeros_like(partial[1]))
    torch.testing.assert_close(
        partial[0] + partial[1], whole, rtol=1e-3, atol=1e-3 * float(whole.abs().max())
    )
