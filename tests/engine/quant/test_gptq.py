"""GPTQ for the W2 codec: equivalence to the textbook loop, error vs RTN, edge cases."""

from __future__ import annotations

import math

import pytest
import torch

from engine.codecs import w2
from engine.quant.gptq import (
    GPTQError,
    HessianAccumulator,
    factor_hessian,
    gptq_quantize,
    gptq_reference,
    output_error,
    prepare_hessian,
    relative_frobenius,
)


def _problem(
    out_f: int = 96, in_f: int = 256, n: int = 1024, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A weight and correlated, anisotropic inputs (where GPTQ has something to exploit)."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(out_f, in_f, generator=gen)
    mix = torch.randn(in_f, in_f, generator=gen) / math.sqrt(in_f)
    z = torch.randn(n, in_f, generator=gen)
    x = (z @ mix + 0.3 * z) * torch.exp(torch.randn(in_f, generator=gen))
    acc = HessianAccumulator(in_f)
    acc.add(x)
    return w, x, acc.hessian


def _direct_output_error(w: torch.Tensor, q: torch.Tensor, x: torch.Tensor) -> float:
    return float(((w - q) @ x.t()).norm() / (w @ x.t()).norm())


def test_hessian_accumulates_in_chunks() -> None:
    x = torch.randn(300, 64)
    acc = HessianAccumulator(64)
    for chunk in (x[:7], x[7:150], x[150:]):
        acc.add(chunk)
    other = HessianAccumulator(64)
    other.add(x[:100])
    rest = HessianAccumulator(64)
    rest.add(x[100:])
    other.merge(rest)
    expected = 2 * x.t() @ x / 300
    assert torch.allclose(acc.hessian, expected, rtol=1e-4, atol=1e-4)
    assert torch.allclose(other.hessian, expected, rtol=1e-4, atol=1e-4)
    assert acc.count == other.count == 300


@pytest.mark.parametrize("blocksize", [32, 64, 128])
def test_blocked_matches_textbook_loop(blocksize: int) -> None:
    w, _x, h = _problem(out_f=48, in_f=192)
    fast = gptq_quantize(w, h, blocksize=blocksize, scales="rtn", refit=0)
    ref = gptq_reference(w, h)
    assert (fast.codes == ref.codes).float().mean() > 0.999
    assert (
        torch.equal(fast.scales, ref.scales)
        or float((fast.scales - ref.scales).abs().max()) <= float(ref.scales.max()) * 0.2
    )
    assert fast.loss == pytest.approx(ref.loss, rel=1e-3)


def test_gptq_lowers_output_error_against_rtn() -> None:
    w, x, h = _problem()
    rtn = w2.quantize_rtn(w).dequantize(torch.float32)
    result = gptq_quantize(w, h)
    q = result.dequantize()
    err_rtn, err_gptq = _direct_output_error(w, rtn, x), _direct_output_error(w, q, x)
    assert err_gptq < 0.95 * err_rtn, (err_gptq, err_rtn)
    # The closed form used by the pipeline agrees with the direct computation.
    assert output_error(w, q, h) == pytest.approx(err_gptq, rel=1e-3)
    # GPTQ trades weight error for output error.
    assert relative_frobenius(w, q) > relative_frobenius(w, rtn)


def test_result_is_a_valid_w2_tensor() -> None:
    w, _x, h = _problem(out_f=32, in_f=128)
    result = gptq_quantize(w, h)
    packed = result.to_w2()
    assert packed.shape == (32, 128)
    assert torch.equal(packed.dequantize(torch.float32), result.dequantize())
    # Scales are exactly what the file stores (ue5m3 round trip is the identity on them).
    assert torch.equal(w2.round_scales(result.scales), result.scales)
    assert int(result.codes.max()) <= 3


def test_act_order_keeps_static_contiguous_groups() -> None:
    w, x, h = _problem()
    plain = gptq_quantize(w, h, act_order=True, scales="rtn", refit=0)
    # Static groups: scales come from the original weights by the RTN rule.
    assert torch.equal(plain.scales, w2.round_scales(w2.rtn_scales(w)))
    result = gptq_quantize(w, h, act_order=True)
    rtn = w2.quantize_rtn(w).dequantize(torch.float32)
    # Inputs of very different importance: visiting the important ones first pays off.
    assert _direct_output_error(w, result.dequantize(), x) < 0.8 * _direct_output_error(w, rtn, x)


def test_dead_inputs_are_zeroed_without_nans() -> None:
    w, x, _ = _problem(out_f=32, in_f=128)
    x[:, 5] = 0.0
    x[:, 64:96] = 0.0  # a whole dead group
    acc = HessianAccumulator(128)
    acc.add(x)
    result = gptq_quantize(w, acc.hessian)
    q = result.dequantize()
    assert torch.isfinite(q).all()
    assert float(q[:, 64:96].abs().max()) == 0.0  # all-zero group -> scale 0


def test_rank_deficient_hessian_gets_more_dampening() -> None:
    w = torch.randn(16, 64)
    x = torch.randn(8, 64)  # rank 8 < 64
    h = 2 * x.t() @ x / 8
    result = gptq_quantize(w, h, damp=0.0)
    assert torch.isfinite(result.dequantize()).all()
    assert result.damp_used > 0.0


def test_broken_hessian_raises() -> None:
    h = torch.full((64, 64), float("nan"))
    with pytest.raises((GPTQError, RuntimeError)):
        gptq_quantize(torch.randn(8, 64), h)


def test_shape_checks() -> None:
    with pytest.raises(ValueError, match="multiple of 32"):
        gptq_quantize(torch.randn(4, 40), torch.eye(40))
    with pytest.raises(ValueError, match="Hessian shape"):
        gptq_quantize(torch.randn(4, 64), torch.eye(32))
    with pytest.raises(ValueError, match="blocksize"):
        gptq_quantize(torch.randn(4, 64), torch.eye(64), blocksize=48)


def test_loss_is_the_hessian_weighted_error() -> None:
    """The column loop's summed loss equals tr(ΔW H ΔWᵀ) / 2 for the dampened H, which is
    what the refit rounds compare."""
    w, _x, h = _problem(out_f=40, in_f=128)
    for act_order in (False, True):
        r = gptq_quantize(w, h, act_order=act_order, scales="rtn", refit=0)
        hd, _dead = prepare_hessian(h, 0.01)
        delta = w - r.dequantize()
        assert r.loss == pytest.approx(float(((delta @ hd) * delta).sum()) / 2, rel=1e-3)


@pytest.mark.parametrize("act_order", [False, True])
def test_weighted_scales_and_refit_lower_the_output_error(act_order: bool) -> None:
    w, x, h = _problem(out_f=128, in_f=256, n=2048, seed=3)
    plain = gptq_quantize(w, h, act_order=act_order, scales="rtn", refit=0)
    weighted = gptq_quantize(w, h, act_order=act_order, refit=0)
    refit = gptq_quantize(w, h, act_order=act_order)
    e_plain, e_weighted, e_refit = (
        _direct_output_error(w, r.dequantize(), x) for r in (plain, weighted, refit)
    )
    assert e_weighted < e_plain, (e_weighted, e_plain)
    # A refit round is kept only when it lowers the loss, so it can never be worse.
    assert e_refit <= e_weighted * (1 + 1e-4), (e_refit, e_weighted)
    assert refit.loss <= weighted.loss * (1 + 1e-4)
    # Still a valid W2 tensor: stored scales, codes 0..3, decodes to the same matrix.
    assert torch.equal(w2.round_scales(refit.scales), refit.scales)
    assert torch.equal(refit.to_w2().dequantize(torch.float32), refit.dequantize())


def test_bad_scale_options() -> None:
    with pytest.raises(ValueError, match="scale rule"):
        gptq_quantize(torch.randn(4, 64), torch.eye(64), scales="minmax")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="refit"):
        gptq_quantize(torch.randn(4, 64), torch.eye(64), refit=-1)


@pytest.mark.parametrize("act_order", [True, False])
def test_a_shared_factor_gives_the_same_result(act_order: bool) -> None:
    """The converter factors a layer's gate/up Hessian once for all its experts."""
    w, _x, h = _problem(out_f=64, in_f=192, seed=3)
    other = torch.randn(80, 192, generator=torch.Generator().manual_seed(4))
    factor = factor_hessian(h, damp=0.01, act_order=act_order)
    for weight in (w, other):
        alone = gptq_quantize(weight, h, act_order=act_order)
        shared = gptq_quantize(weight, factor, act_order=act_order)
        assert torch.equal(alone.codes, shared.codes)
        assert torch.equal(alone.scales, shared.scales)
        assert alone.loss == shared.loss


def test_a_factor_made_with_other_options_is_refused() -> None:
    w, _x, h = _problem(out_f=16, in_f=64)
    factor = factor_hessian(h, damp=0.01, act_order=True)
    with pytest.raises(ValueError, match="act_order=True"):
        gptq_quantize(w, factor, act_order=False)
    with pytest.raises(ValueError, match="damp=0.01"):
        gptq_quantize(w, factor, damp=0.1, act_order=True)
    with pytest.raises(ValueError, match="does not match"):
        gptq_quantize(torch.randn(16, 96), factor, act_order=True)


@pytest.mark.parametrize(("act_order", "refit"), [(True, 1), (False, 1), (True, 0), (True, 2)])
def test_the_result_s_output_error_is_output_error(act_order: bool, refit: int) -> None:
    """Taken from GPTQ's own sums under the dampened Hessian, corrected back to the raw one,
    it equals output_error's direct product, dead inputs included."""
    w, x, _ = _problem(out_f=64, in_f=192, seed=5)
    x[:, 7] = 0.0
    x[:, 96:128] = 0.0
    acc = HessianAccumulator(192)
    acc.add(x)
    result = gptq_quantize(w, acc.hessian, act_order=act_order, refit=refit)
    direct = output_error(w, result.dequantize(), acc.hessian)
    assert result.output_error == pytest.approx(direct, rel=1e-4)
    assert direct == pytest.approx(_direct_output_error(w, result.dequantize(), x), rel=1e-3)


def test_output_error_after_extra_dampening_is_computed() -> None:
    """Where the factorization needed more dampening, the sweep's sums belong to another
    matrix: the output error is then computed directly, and still right."""
    w = torch.randn(16, 64, generator=torch.Generator().manual_seed(6))
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(7))
    h = 2 * x.t() @ x / 8
    result = gptq_quantize(w, h, damp=0.0)
    assert result.damp_used > 0.0
    assert result.output_error == pytest.approx(output_error(w, result.dequantize(), h), rel=1e-4)
