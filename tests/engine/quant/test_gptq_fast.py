"""The fast GPTQ scale rule gives what its previous implementation gave (gptq_previous.py)."""

from __future__ import annotations

import math

import pytest
import torch

from engine.codecs import w2
from engine.quant import gptq as gptq_mod
from engine.quant.gptq import HessianAccumulator, gptq_quantize, prepare_hessian
from engine.quant.w2_scales import _level4_threshold, project, refit, refit_scales, weighted_scales
from tests.engine.quant.gptq_previous import (
    gptq_quantize_reference,
    refit_scales_reference,
    weighted_scales_reference,
)


def _problem(out_f: int, in_f: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(out_f, in_f, generator=gen) * torch.exp(torch.randn(out_f, 1, generator=gen))
    mix = torch.randn(in_f, in_f, generator=gen) / math.sqrt(in_f)
    z = torch.randn(4 * in_f, in_f, generator=gen)
    acc = HessianAccumulator(in_f)
    acc.add((z @ mix + 0.3 * z) * torch.exp(torch.randn(in_f, generator=gen)))
    return w, acc.hessian


def test_level4_threshold_is_the_exact_rounding_test() -> None:
    """``|w| >= threshold(c)`` must be exactly ``fl(|w| / c) > 2.5``, the test project uses,
    including the float32 neighbours of the boundary."""
    gen = torch.Generator().manual_seed(0)
    c = torch.exp(torch.randn(4096, generator=gen) * 3)
    c = torch.cat((c, w2.round_scales(c)))  # any float, and the stored values GPTQ tries
    thr = _level4_threshold(c)
    assert bool(torch.isfinite(thr).all())
    near = torch.stack([(thr.view(torch.int32) + k).view(torch.float32) for k in (-2, -1, 0, 1)])
    mags = torch.cat((near, (torch.rand(8, c.numel(), generator=gen) * 6) * c))
    assert torch.equal(mags >= thr, mags / c > 2.5)
    assert torch.equal(project(mags / c).abs() == 4, mags >= thr)


def test_weighted_scales_match_the_previous_search() -> None:
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(96, 512, generator=gen) * torch.exp(
        torch.randn(96, 16, generator=gen).repeat_interleave(32, 1) * 2
    )
    w[:5, 64:96] = 0.0  # all-zero groups keep scale 0
    w[5:9, 96:128] = 1e-30  # rounds to scale code 0
    w[9:12, 128:160] = 3.0e4  # near the top of ue5m3: the candidates are clamped at code 255
    w[12:14] = w[12:14].round()  # ties among the magnitudes
    imp = torch.exp(torch.randn(512, generator=gen) * 2)
    imp[::7] = 0.0
    ours, ref = weighted_scales(w, imp), weighted_scales_reference(w, imp)
    assert float((ours == ref).float().mean()) >= 0.9999
    # Non-contiguous input, as the per-group rule passes it without act-order.
    block = w.t().contiguous()[:32].t()
    assert torch.equal(weighted_scales(block, imp[:32]), weighted_scales_reference(block, imp[:32]))


def test_refit_matches_the_previous_solve() -> None:
    w, h = _problem(64, 256, 2)
    hd, _ = prepare_hessian(h, 0.01)
    codes = w2.quantize_rtn(w).codes()
    ours, ref = refit_scales(w, hd, codes), refit_scales_reference(w, hd, codes)
    # A different summation order may move a scale across a ue5m3 rounding boundary: by at
    # most one stored step, rarely.
    assert float((ours == ref).float().mean()) >= 0.999
    step = (w2.encode_scales(ours).int() - w2.encode_scales(ref).int()).abs()
    assert int(step.max()) <= 1


def test_refit_loss_estimate_is_close_to_the_exact_loss() -> None:
    w, h = _problem(48, 256, 3)
    hd, _ = prepare_hessian(h, 0.01)
    first = gptq_quantize(w, h, act_order=True, refit=0)
    fit = refit(w, hd, first.codes, (first.scales,))
    for scales, estimate in ((fit.scales, fit.loss_estimate), (first.scales, fit.others[0])):
        exact = gptq_mod._loss(w, hd, first.codes, scales)
        # The ranking margin (1e-4) must be far above the estimate's error.
        assert estimate == pytest.approx(exact, rel=1e-5)


@pytest.mark.parametrize(
    ("act_order", "scales", "refits"),
    [
        (True, "weighted", 1),
        (False, "weighted", 1),
        (True, "weighted", 2),
        (True, "rtn", 1),
        (False, "rtn", 0),
    ],
)
def test_gptq_matches_the_previous_implementation(
    act_order: bool, scales: gptq_mod.ScaleRule, refits: int
) -> None:
    for seed, (out_f, in_f) in enumerate([(96, 256), (160, 128)]):
        w, h = _problem(out_f, in_f, 10 + seed)
        ours = gptq_quantize(w, h, act_order=act_order, scales=scales, refit=refits)
        ref = gptq_quantize_reference(w, h, act_order=act_order, scales=scales, refit=refits)
        assert float((ours.codes == ref.codes).float().mean()) >= 0.999
        assert ours.loss == pytest.approx(ref.loss, rel=1e-6)
        hd, _ = prepare_hessian(h, 0.01)
        delta = w - ours.dequantize()
        assert ours.loss == pytest.approx(float(((delta @ hd) * delta).sum()) / 2, rel=1e-3)


def test_exact_comparisons_choose_as_the_estimates_do(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the margin so wide that every comparison needs exact losses, the choice is the
    same: the estimates only skip work."""
    w, h = _problem(96, 256, 20)
    fast = gptq_quantize(w, h, act_order=True)
    monkeypatch.setattr(gptq_mod, "LOSS_ESTIMATE_RTOL", 10.0)
    exact = gptq_quantize(w, h, act_order=True)
    assert torch.equal(fast.codes, exact.codes) and torch.equal(fast.scales, exact.scales)
    assert fast.loss == exact.loss


@pytest.mark.parametrize("act_order", [True, False])
def test_the_sweep_is_bit_identical(act_order: bool) -> None:
    """The column loop only lost Python scalars and temporaries: same floats, same order."""
    w, h = _problem(64, 192, 30)
    w[:4, 32:64] = 0.0
    ours = gptq_quantize(w, h, act_order=act_order, scales="rtn", refit=0)
    ref = gptq_quantize_reference(w, h, act_order=act_order, scales="rtn", refit=0)
    assert torch.equal(ours.codes, ref.codes) and torch.equal(ours.scales, ref.scales)
    assert ours.loss == ref.loss
