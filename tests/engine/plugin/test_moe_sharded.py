"""``sparkcode_w2`` experts sharded as vLLM shards them: tensor and expert parallelism.

The layers are built and loaded through the method's own loaders as two ranks would build
them (``tests.support.moe_layers.method_and_layer`` with ``tp`` or ``ep``), from the same
whole-checkpoint tensors:

* tensor parallelism: each rank's W2 codes, scales and FP4 copies dequantize to exactly its
  slice of the dense matrices (gate/up rows, down columns), and the two ranks' outputs add up
  to the unsharded layer's;
* expert parallelism: a rank holds half the experts; ``apply`` takes global ids, skips the
  other rank's experts and counts only its own; the two partial sums add up;
* neither path reads a tensor on the host or has a routing-dependent shape.

On a CPU ``apply`` runs the PyTorch reference; the Triton kernels get the same EP cases in
``tests/kernels/test_moe_kernels.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from kernels.w2_moe_layout import dequant_experts_reference
from tests.support.moe_layers import load_experts, method_and_layer
from tests.support.no_host_sync import no_host_sync

EXPERTS, HIDDEN, INTER, TOP_K, LIMIT = 8, 64, 128, 4, 10.0
POOLED = (1, 6)  # one pooled expert on each expert-parallel rank


@pytest.fixture(autouse=True)
def _quiet_coverage(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.plugin import _fp4_pool, _w2_moe

    monkeypatch.setattr(_w2_moe, "COVERAGE", _fp4_pool.LiveCoverage(interval_s=3600))


def _layer(**shard: tuple[int, int]) -> tuple[Any, Any, dict[Any, torch.Tensor]]:
    method, layer = method_and_layer(EXPERTS, HIDDEN, INTER, POOLED, LIMIT, **shard)
    dense = load_experts(layer, EXPERTS, HIDDEN, INTER, pooled=POOLED, scale=0.3)
    method.process_weights_after_loading(layer)
    return method, layer, dense


def _routing(tokens: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.stack([torch.randperm(EXPERTS, generator=g)[:TOP_K] for _ in range(tokens)])
    x = torch.randn(tokens, HIDDEN, generator=g)
    return x, ids.to(torch.int32), torch.rand(tokens, TOP_K, generator=g)


def test_each_tensor_parallel_rank_holds_its_slice_of_every_expert() -> None:
    part = INTER // 2
    for rank in (0, 1):
        _, layer, dense = _layer(tp=(rank, 2))
        assert layer.w2q_sizes == (part, HIDDEN)
        w13, w2 = dequant_experts_reference(layer.w2q_weights)  # FP4 where a slot serves
        rows = slice(rank * part, (rank + 1) * part)
        for e in range(EXPERTS):
            assert torch.equal(w13[e, :part], dense[e, "gate_proj"][rows])
            assert torch.equal(w13[e, part:], dense[e, "up_proj"][rows])
            assert torch.equal(w2[e], dense[e, "down_proj"][:, rows])
        assert layer.expert_slot.tolist() == [-1, 0, -1, -1, -1, -1, 1, -1]


@pytest.mark.parametrize("tokens", [3, 40])
def test_tensor_parallel_ranks_add_up_to_the_whole_layer(tokens: int) -> None:
    x, ids, wts = _routing(tokens, seed=tokens)
    whole_method, whole, _ = _layer()
    want = whole_method.apply(whole, x, wts, ids, None, None)
    parts = []
    for rank in (0, 1):
        method, layer, _ = _layer(tp=(rank, 2))
        parts.append(method.apply(layer, x, wts, ids, None, None))
        assert torch.equal(layer.expert_tokens, whole.expert_tokens)  # same routing counted
    torch.testing.assert_close(
        parts[0] + parts[1], want, rtol=1e-4, atol=1e-5 * float(want.abs().max())
    )
    assert float(parts[0].abs().max()) > 0.05 * float(want.abs().max())  # both ranks count


def test_expert_parallel_ranks_give_partial_sums_that_add_up() -> None:
    x, ids, wts = _routing(12, seed=4)
    whole_method, whole, _ = _layer()
    want = whole_method.apply(whole, x, wts, ids, None, None)
    parts = []
    for rank in (0, 1):
        method, layer, _ = _layer(ep=(rank, 2))
        assert layer.w13_weight_packed.shape[0] == EXPERTS // 2
        assert layer.expert_slot.tolist() == (
            [-1, 0, -1, -1] if rank == 0 else [-1, -1, 0, -1]
        )  # global 1 and 6, local ids
        parts.append(method.apply(layer, x, wts, ids, None, None))
        own = slice(rank * EXPERTS // 2, (rank + 1) * EXPERTS // 2)
        assert torch.equal(layer.expert_tokens, whole.expert_tokens[own])
    torch.testing.assert_close(
        parts[0] + parts[1], want, rtol=1e-4, atol=1e-5 * float(want.abs().max())
    )
    # A token routed only to rank 1's experts gets exactly nothing from rank 0.
    only_one = torch.tensor([[4, 5, 6, 7]], dtype=torch.int32)
    method, layer, _ = _layer(ep=(0, 2))
    assert torch.equal(
        method.apply(layer, x[:1], wts[:1], only_one, None, None),
        torch.zeros(1, HIDDEN, dtype=x.dtype),
    )


@pytest.mark.parametrize("shard", [{"tp": (1, 2)}, {"ep": (1, 2)}])
def test_sharded_apply_has_no_host_sync_and_routing_free_shapes(
    shard: dict[str, tuple[int, int]],
) -> None:
    method, layer, _ = _layer(**shard)
    traces = []
    for seed in (1, 2):
        x, ids, wts = _routing(8, seed=seed)
        if seed == 2:
            ids = torch.arange(TOP_K, dtype=torch.int32).repeat(8, 1)  # all on rank 0's experts
        with no_host_sync() as mode:
            out = method.apply(layer, x, wts, ids, None, None)
        assert out.shape == x.shape
        traces.append(mode.trace)
    assert len(traces[0]) > 10
    assert traces[0] == traces[1]


def test_a_checkpoint_tensor_that_does_not_split_is_named() -> None:
    _, layer = method_and_layer(EXPERTS, HIDDEN, INTER, tp=(0, 2))
    p: Any = layer.w2_weight_packed
    with pytest.raises(
        ValueError,
        match=r"experts.3.down_proj.weight_packed: expert 3 has "
        r"shape \(64, 16\); at tensor parallel size 2",
    ):
        p.weight_loader(
            p,
            torch.zeros(HIDDEN, INTER // 8, dtype=torch.uint8),
            "experts.3.down_proj.weight_packed",
            shard_id="w2",
            expert_id=3,
        )
    with pytest.raises(
        ValueError,
        match="expert intermediate size per tensor-parallel rank divisible by 32, got 16",
    ):
        method_and_layer(EXPERTS, HIDDEN, 64, tp=(0, 4))


def test_a_rank_holding_no_pooled_expert_refuses_the_other_ranks_fp4_copies() -> None:
    # Expert 6 is pooled and lives on rank 1: rank 0 has no slot, yet its layer must take the
    # checkpoint's FP4 tensors of expert 6 (and say they are not its own), as vLLM's loader
    # asks every rank for every expert.
    method, built = method_and_layer(EXPERTS, HIDDEN, INTER, (6,), ep=(0, 2))
    load_experts(built, EXPERTS, HIDDEN, INTER, pooled=(6,))
    method.process_weights_after_loading(built)
    layer: Any = built
    assert layer.w2q_weights.slots == 0 and layer.expert_slot.tolist() == [-1] * 4
