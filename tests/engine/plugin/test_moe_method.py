"""The served MoE method as vLLM calls it: graph-safe, GLM's semantics, live pool swaps.

``W2ExpertsMethod.apply`` on a CPU runs the PyTorch reference of ``kernels.w2_moe``; these
tests drive it on layers loaded through the method's own loaders:

* no op in the whole ``apply`` reads a tensor on the host or has a data-dependent shape
  (``tests.support.no_host_sync``), and the op trace is the same for any routing;
* a GLM-5.3-Flash-shaped layer (scaled-down widths, top-8, ``swiglu_limit`` 10) agrees with
  the calibration code's own expert math (``engine.quant.calib.down_inputs``);
* ``ExpertPool.swap`` changes which expert a slot serves in place.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch

from engine.codecs import nvfp4
from engine.quant import calib
from tests.support.moe_layers import dense_moe, load_experts, method_and_layer, random_expert
from tests.support.no_host_sync import HostSyncError, no_host_sync

# GLM-5.3-Flash: hidden 4096, experts 2048 wide, 288 experts, top-8, swiglu_limit 10.
GLM_HIDDEN, GLM_INTER, GLM_EXPERTS, GLM_TOPK, GLM_LIMIT = 256, 128, 32, 8, 10.0


@pytest.fixture(autouse=True)
def _quiet_coverage(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.plugin import _fp4_pool, _w2_moe

    monkeypatch.setattr(_w2_moe, "COVERAGE", _fp4_pool.LiveCoverage(interval_s=3600))


def _loaded(
    experts: int,
    hidden: int,
    inter: int,
    pooled: tuple[int, ...] = (),
    limit: float | None = None,
    scale: float = 0.1,
) -> tuple[Any, Any, dict[Any, Any]]:
    method, layer = method_and_layer(experts, hidden, inter, pooled, limit)
    dense = load_experts(layer, experts, hidden, inter, pooled=pooled, scale=scale)
    method.process_weights_after_loading(layer)
    return method, layer, dense


def _routing(
    tokens: int, experts: int, top_k: int, seed: int, skewed: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    if skewed:  # every token on the same top_k experts
        ids = torch.arange(top_k).repeat(tokens, 1)
    else:
        ids = torch.stack([torch.randperm(experts, generator=g)[:top_k] for _ in range(tokens)])
    return ids.to(torch.int32), torch.rand(tokens, top_k, generator=g)


@pytest.mark.parametrize("tokens", [1, 8, 40])  # one decode token, a k=7 verify step, prefill
def test_apply_has_no_host_sync_and_routing_free_shapes(tokens: int) -> None:
    method, layer, _ = _loaded(16, 64, 32, pooled=(2, 5), limit=GLM_LIMIT)
    x = torch.randn(tokens, 64, generator=torch.Generator().manual_seed(tokens))
    traces = []
    for skewed in (False, True):
        ids, wts = _routing(tokens, 16, 4, seed=tokens, skewed=skewed)
        with no_host_sync() as mode:
            out = method.apply(layer, x, wts, ids, None, None)
        assert out.shape == x.shape
        traces.append(mode.trace)
    assert len(traces[0]) > 10
    assert traces[0] == traces[1]  # the same ops and shapes whatever the routing


def test_the_detector_catches_what_the_old_apply_did() -> None:
    ids = torch.tensor([[0, 2], [2, 3]])
    with pytest.raises(HostSyncError, match="bincount"), no_host_sync():
        torch.bincount(ids.reshape(-1), minlength=4)
    with pytest.raises(HostSyncError, match="tolist"), no_host_sync():
        torch.zeros(4, dtype=torch.int64).tolist()
    with pytest.raises(HostSyncError, match="_local_scalar_dense"), no_host_sync():
        int(ids.sum())
    with pytest.raises(HostSyncError, match="boolean mask"), no_host_sync():
        torch.arange(4)[ids.reshape(-1) == 2]
    with pytest.raises(HostSyncError, match="nonzero"), no_host_sync():
        (ids == 2).nonzero()


def _glm_reference(
    x: torch.Tensor,
    ids: torch.Tensor,
    wts: torch.Tensor,
    dense: dict[Any, torch.Tensor],
    on_input: bool,
) -> torch.Tensor:
    """Calibration's expert math per (token, k): ``down(calib.down_inputs(...))``."""
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for k in range(ids.shape[1]):
            e, w = int(ids[t, k]), float(wts[t, k])
            xs = x[t : t + 1] * w if on_input else x[t : t + 1]
            h = calib.down_inputs(xs, dense[e, "gate_proj"], dense[e, "up_proj"], GLM_LIMIT)
            y = h @ dense[e, "down_proj"].T
            out[t] += (y if on_input else w * y)[0]
    return out


@pytest.mark.parametrize(("tokens", "top_k", "on_input"), [(24, GLM_TOPK, False), (6, 1, True)])
def test_a_glm_shaped_layer_matches_the_calibration_math(
    tokens: int, top_k: int, on_input: bool
) -> None:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(tokens, GLM_HIDDEN, generator=g)
    router = torch.randn(GLM_EXPERTS, GLM_HIDDEN, generator=g)
    bias = torch.randn(GLM_EXPERTS, generator=g) * 0.1
    ids = calib.route(x, router, bias, top_k)  # GLM's own routing, as calibration routes
    scores = torch.sigmoid(x @ router.T).gather(1, ids)
    wts = scores / scores.sum(-1, keepdim=True)  # norm_topk_prob
    routed = sorted(set(ids.reshape(-1).tolist()))
    pooled = (routed[0], routed[-1])  # two routed experts are served from the FP4 pool
    method, layer, dense = _loaded(
        GLM_EXPERTS, GLM_HIDDEN, GLM_INTER, pooled=pooled, limit=GLM_LIMIT, scale=0.5
    )
    layer.apply_router_weight_on_input = on_input  # vLLM allows it with top-1 routing only
    out = method.apply(layer, x, wts, ids, None, None)
    want = _glm_reference(x, ids, wts, dense, on_input)
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-4 * float(want.abs().max()))
    # The clamp matters at these activations: without it the answer is far off.
    unclamped = dense_moe(
        x * wts[:, :1] if on_input else x, ids, torch.ones_like(wts) if on_input else wts, dense
    )
    assert (unclamped - want).abs().max() > 0.1 * want.abs().max()


def test_a_swap_serves_another_expert_from_the_same_slot() -> None:
    method, layer, dense = _loaded(4, 64, 32, pooled=(1,))
    pool = layer.w2q_pool
    x = torch.randn(5, 64, generator=torch.Generator().manual_seed(3))
    ids, wts = _routing(5, 4, 2, seed=3)
    before = {
        name: getattr(layer, name).data_ptr()
        for name in ("w13_weight_fp4", "w2_weight_fp4_scale", "expert_slot")
    }
    source = random_expert(64, 32, torch.Generator().manual_seed(99))
    fp4 = {p: nvfp4.quantize(w) for p, w in source.items()}
    tensors = pool.expert_tensors(fp4["gate_proj"], fp4["up_proj"], fp4["down_proj"])
    with pytest.raises(ValueError, match="slot 1 is not one of this pool's 1 slots"):
        pool.swap(1, 3, tensors)
    with pytest.raises(ValueError, match=r"w2_weight_fp4: expected torch.uint8 \(64, 16\)"):
        pool.swap(0, 3, {**tensors, "w2_weight_fp4": tensors["w2_weight_fp4"][:1]})
    assert layer.expert_slot.tolist() == [-1, 0, -1, -1]  # a refused swap changed nothing
    assert pool.swap(0, 3, tensors) == 1
    assert layer.expert_slot.tolist() == [-1, -1, -1, 0]
    assert pool.experts == [3] and pool.slot == {3: 0}
    assert {name: getattr(layer, name).data_ptr() for name in before} == before
    served = dict(dense)
    served.update({(3, p): f.dequantize(torch.float32) for p, f in fp4.items()})
    from tests.support.moe_layers import PROJS
    from tests.support.moe_layers import load_experts as reload

    # Expert 1 is back on its W2 codes: the same values a pool-less load serves.
    _, plain = method_and_layer(4, 64, 32)
    w2_values = reload(plain, 4, 64, 32)
    served.update({(1, p): w2_values[1, p] for p, _ in PROJS})
    out = method.apply(layer, x, wts, ids, None, None)
    torch.testing.assert_close(out, dense_moe(x, ids, wts, served), rtol=1e-4, atol=1e-4)


def test_coverage_reads_wait_for_cuda_graph_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.plugin import _fp4_pool

    cov = _fp4_pool.LiveCoverage(interval_s=3600)
    _, layer = method_and_layer(4, 64, 32)
    cov.register(layer, 1)
    assert cov.may_read()  # CPU counters: always
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])  # the module _fp4_pool reads
    cov._on_cuda = True  # as if the counters lived on a GPU
    cov._started = 1000.0
    assert not cov.may_read()  # loaded, no capture seen yet: one may be about to start
    cov.capture_seen = clock[0] + 30.0  # apply ran under a capture
    clock[0] += 10
    assert not cov.may_read()
    clock[0] += 25
    assert cov.may_read()  # 30 s after the last captured apply
    eager = _fp4_pool.LiveCoverage(interval_s=3600)
    eager.register(layer, 1)
    eager._on_cuda, eager._started = True, clock[0]
    clock[0] += 601
    assert eager.may_read()  # nothing captured in 10 minutes: an eager engine
