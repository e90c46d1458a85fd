"""Live re-selection of the FP4 pool (``engine.plugin._pool_live``).

Unit tests build a ``sparkcode_w2`` MoE layer with one pool slot and FP4 candidates on the host,
route traffic through the real method, and check that a swap leaves the layer computing
exactly what a layer with that expert pooled from the start computes, in the same memory.
The served engine is ``tests/e2e/test_p12_pool_serving.py``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from tests.support import moe_layers

HIDDEN, INTER, EXPERTS = 64, 32, 4


@pytest.fixture(autouse=True)
def _quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    """No coverage thread, and vLLM's worker unpatched again after each test (registering a
    layer installs the step hook)."""
    from vllm.v1.worker.gpu_worker import Worker

    from engine.plugin import _fp4_pool, _pool_live, _w2_moe

    monkeypatch.setattr(_w2_moe, "COVERAGE", _fp4_pool.LiveCoverage(interval_s=3600))
    monkeypatch.setattr(_pool_live, "RESELECT", _pool_live.LiveReselection(interval_s=3600))
    monkeypatch.setattr(Worker, "execute_model", Worker.execute_model)


def _layer(pooled: tuple[int, ...], candidates: tuple[int, ...] = ()) -> tuple[Any, Any]:
    from engine.plugin._w2_moe import W2ExpertsMethod

    moe = SimpleNamespace(
        moe_parallel_config=SimpleNamespace(tp_size=1, use_ep=False),
        activation="silu",
        swiglu_limit=None,
    )
    method = W2ExpertsMethod(moe, list(pooled), candidates=list(candidates))
    layer = torch.nn.Module()
    method.create_weights(layer, EXPERTS, HIDDEN, INTER, torch.bfloat16)
    moe_layers.load_experts(layer, EXPERTS, HIDDEN, INTER, pooled=pooled + candidates)
    method.process_weights_after_loading(layer)
    return method, layer


def _reselection(layer: Any) -> Any:
    from engine.plugin._pool_live import LiveReselection

    live = LiveReselection(interval_s=0.0)
    live.register(0, layer)
    return live


def _route(method: Any, layer: Any, hot: int, tokens: int = 6, seed: int = 0) -> torch.Tensor:
    """Run ``tokens`` tokens, each routed to ``hot`` and one other expert."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, HIDDEN, generator=g)
    other = torch.tensor([(hot + 1 + t % (EXPERTS - 1)) % EXPERTS for t in range(tokens)])
    ids = torch.stack([torch.full((tokens,), hot), other], dim=1)
    wts = torch.rand(tokens, 2, generator=g)
    out: torch.Tensor = method.apply(layer, x, wts, ids, None, None)
    return out


def test_candidates_load_to_the_host_and_only_the_pool_has_slots() -> None:
    _, layer = _layer(pooled=(1,), candidates=(2, 3))
    assert layer.w13_weight_fp4.shape[0] == 1
    assert layer.expert_slot.tolist() == [-1, 0, -1, -1]
    host = layer.w2q_pool.host
    assert host.experts == [2, 3] and host.has(2) and host.has(3) and not host.has(1)
    assert host.tensors(2)["w13_weight_fp4"].shape == layer.w13_weight_fp4.shape[1:]


def test_a_missing_candidate_copy_is_named_after_loading() -> None:
    from engine.plugin._w2_moe import W2ExpertsMethod

    moe = SimpleNamespace(
        moe_parallel_config=SimpleNamespace(tp_size=1, use_ep=False),
        activation="silu",
        swiglu_limit=None,
    )
    method = W2ExpertsMethod(moe, [1], candidates=[3])
    layer = torch.nn.Module()
    method.create_weights(layer, EXPERTS, HIDDEN, INTER, torch.bfloat16)
    moe_layers.load_experts(
        layer, EXPERTS, HIDDEN, INTER, pooled=(1, 3), skip="experts.3.up_proj.weight_fp4_scale"
    )
    with pytest.raises(ValueError, match=r"no experts\.3\.up_proj\.weight_fp4_scale"):
        method.process_weights_after_loading(layer)


def test_a_swap_serves_exactly_what_pooling_that_expert_from_the_start_serves() -> None:
    method, layer = _layer(pooled=(1,), candidates=(2, 3))
    live = _reselection(layer)
    addresses = [
        getattr(layer, n).data_ptr() for n in ("w13_weight_fp4", "w2_weight_fp4", "expert_slot")
    ]
    _route(method, layer, hot=2)
    assert live.step() == 1  # expert 2 got every token, expert 1 a third of them
    assert layer.expert_slot.tolist() == [-1, -1, 0, -1]
    assert live.last == (0, 2, 1)
    assert [
        getattr(layer, n).data_ptr() for n in ("w13_weight_fp4", "w2_weight_fp4", "expert_slot")
    ] == addresses
    fresh_method, fresh = _layer(pooled=(2,))
    got = _route(method, layer, hot=0, seed=5)
    want = _route(fresh_method, fresh, hot=0, seed=5)
    assert torch.equal(got, want)
    # Traffic moves to expert 1: it comes back from the host copy taken when it left.
    for seed in range(4):
        _route(method, layer, hot=1, tokens=12, seed=seed)
    assert live.step() == 1 and layer.expert_slot.tolist() == [-1, 0, -1, -1]
    back_method, back = _layer(pooled=(1,))
    assert torch.equal(
        _route(method, layer, hot=3, seed=7), _route(back_method, back, hot=3, seed=7)
    )
    assert (
        "fp4_reselect: live (2 swaps in 2 checks; last: layer 0 expert 1 in, expert 2 out"
        in live.line()
    )


def test_hysteresis_keeps_a_resident_that_is_nearly_as_hot() -> None:
    method, layer = _layer(pooled=(1,), candidates=(2,))
    live = _reselection(layer)
    x = torch.randn(20, HIDDEN)
    # Expert 2 gets 10 pairs, the resident expert 1 gets 10: no margin, no swap.
    ids = torch.tensor([[1, 0]] * 10 + [[2, 3]] * 10)
    method.apply(layer, x, torch.rand(20, 2), ids, None, None)
    assert live.step() == 0 and layer.expert_slot.tolist() == [-1, 0, -1, -1]
    # Experts without an FP4 copy (0 and 3) are never chosen, however hot.
    ids = torch.tensor([[0, 3]] * 20)
    method.apply(layer, x, torch.rand(20, 2), ids, None, None)
    assert live.step() == 0 and layer.expert_slot.tolist() == [-1, 0, -1, -1]


def test_the_step_hook_runs_before_each_worker_step_and_is_installed_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vllm.v1.worker.gpu_worker import Worker

    from engine.plugin import _pool_live

    calls: list[str] = []

    def execute_model(self: object, out: object) -> object:
        calls.append("step")
        return out

    def step() -> int:
        calls.append("reselect")
        return 0

    monkeypatch.setattr(Worker, "execute_model", execute_model)
    monkeypatch.setattr(_pool_live.RESELECT, "step", step)
    assert _pool_live.install_step_hook() is True
    assert _pool_live.install_step_hook() is False  # a second plugin load changes nothing
    assert Worker.execute_model(object(), "scheduled") == "scheduled"
    assert calls == ["reselect", "step"]


def _rank_decides(rank: int, init: str, reduced: bool, out: Any) -> None:
    """One of two tensor-parallel ranks (a gloo process): its half of a layer (experts 64 wide,
    32 per rank) with expert 1
    pooled and 2, 3 candidates; rank 0 sees expert 2 hot, rank 1 expert 3 (different local
    counts, as two ranks would if their routings ever differed); one re-selection check."""
    torch.distributed.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    try:
        from engine.plugin import _fp4_pool, _w2_moe
        from engine.plugin._pool_live import LiveReselection

        setattr(_w2_moe, "COVERAGE", _fp4_pool.LiveCoverage(interval_s=3600))  # noqa: B010
        moe = SimpleNamespace(
            moe_parallel_config=SimpleNamespace(tp_size=2, tp_rank=rank, use_ep=False),
            activation="silu",
            swiglu_limit=None,
        )
        method = _w2_moe.W2ExpertsMethod(moe, [1], candidates=[2, 3])
        layer: Any = torch.nn.Module()
        method.create_weights(layer, EXPERTS, HIDDEN, 2 * INTER // 2, torch.bfloat16)
        moe_layers.load_experts(layer, EXPERTS, HIDDEN, 2 * INTER, pooled=(1, 2, 3))

        def reduce(t: torch.Tensor) -> torch.Tensor:
            torch.distributed.all_reduce(t)
            return t

        live = LiveReselection(interval_s=3600, every_steps=1, reduce=reduce if reduced else None)
        live._resolved = True  # reduce (or one rank) as given, not vLLM's group
        live.register(0, layer)
        _route(method, layer, hot=2 if rank == 0 else 3, tokens=12 if rank == 0 else 9)
        live._next = 0.0
        made = live.step(now=1.0)
        out.put((rank, made, layer.expert_slot.tolist()))
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.parametrize("reduced", [True, False], ids=["all-reduced", "alone"])
def test_tensor_parallel_ranks_reselect_identically_from_all_reduced_counts(
    tmp_path: Any, reduced: bool
) -> None:
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    init = f"file://{tmp_path / 'rendezvous'}"
    procs = [ctx.Process(target=_rank_decides, args=(r, init, reduced, queue)) for r in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0, 0]
    results = dict((r, (made, table)) for r, made, table in (queue.get(timeout=10) for _ in procs))
    if reduced:  # the same sums on both ranks: both swap expert 2 in, at the same check
        assert results[0] == results[1] == (1, [-1, -1, 0, -1])
    else:  # what each rank would do alone: different experts in the same slot
        assert results[0] == (1, [-1, -1, 0, -1]) and results[1] == (1, [-1, -1, -1, 0])
