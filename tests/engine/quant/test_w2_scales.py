"""W2 scale choices for GPTQ: the weighted search and the least-squares refit."""

from __future__ import annotations

import torch

from engine.codecs import w2
from engine.quant.w2_scales import project, refit_scales, weighted_scales


def _weighted_error(w: torch.Tensor, s: torch.Tensor, imp: torch.Tensor) -> torch.Tensor:
    """Per-group imp-weighted squared error of nearest-code rounding with scales ``s``."""
    out_f, in_f = w.shape
    g = w.reshape(out_f, in_f // 32, 32)
    c = s.unsqueeze(-1)
    q = project(g / torch.where(c > 0, c, 1.0)) * c
    return (((g - q) ** 2) * imp.reshape(in_f // 32, 32)).sum(-1)


def test_uniform_weights_never_lose_to_the_rtn_rule() -> None:
    """With equal weights the search minimises the plain error over stored scales, so it is
    at least as good as the RTN rule (least squares, then rounded), group by group."""
    w = torch.randn(64, 256) * torch.exp(torch.randn(64, 1))
    imp = torch.ones(256)
    ours = weighted_scales(w, imp)
    rtn = w2.round_scales(w2.rtn_scales(w))
    assert torch.equal(w2.round_scales(ours), ours)  # representable in the file
    e_ours, e_rtn = _weighted_error(w, ours, imp), _weighted_error(w, rtn, imp)
    assert bool((e_ours <= e_rtn * (1 + 1e-6)).all())
    assert float(e_ours.sum()) < float(e_rtn.sum())  # ue5m3 rounding leaves room


def test_weights_move_the_scale_towards_the_important_inputs() -> None:
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(32, 32, generator=gen)
    w[:, 0] = 6.0  # one large weight per row; it only matters when its input does
    light = torch.ones(32)
    heavy = light.clone()
    heavy[0] = 1000.0
    s_light, s_heavy = weighted_scales(w, light), weighted_scales(w, heavy)
    # Weighted heavily, the large weight is fitted better (its level 4 wants scale 1.5),
    # at the cost of the other inputs.
    assert float((s_heavy - 1.5).abs().mean()) < float((s_light - 1.5).abs().mean())

    def col0_error(s: torch.Tensor) -> float:
        return float((project(w[:, :1] / s) * s - 6.0).abs().mean())

    assert col0_error(s_heavy) < 0.5 * col0_error(s_light)


def test_all_zero_group_keeps_scale_zero() -> None:
    w = torch.randn(8, 64)
    w[:, 32:] = 0.0
    s = weighted_scales(w, torch.rand(64))
    assert float(s[:, 1].abs().max()) == 0.0
    assert bool((s[:, 0] > 0).all())


def test_refit_solves_the_hessian_weighted_least_squares() -> None:
    gen = torch.Generator().manual_seed(2)
    out_f, in_f = 6, 96
    w = torch.randn(out_f, in_f, generator=gen)
    x = torch.randn(512, in_f, generator=gen) * torch.exp(torch.randn(in_f, generator=gen))
    h = 2 * x.t() @ x / 512
    codes = w2.quantize_rtn(w).codes()
    s = refit_scales(w, h, codes)
    assert torch.equal(w2.round_scales(s), s)
    # Against a direct least-squares fit of q = sum_g s_g c_g in the output space (X),
    # before the ue5m3 rounding: the refit's error is within that rounding of the optimum.
    c = w2.code_values(codes).reshape(out_f, in_f // 32, 32)
    for r in range(out_f):
        basis = torch.zeros(in_f // 32, in_f)
        for g in range(in_f // 32):
            basis[g, g * 32 : (g + 1) * 32] = c[r, g]
        a = basis @ x.t()  # [groups, tokens]
        exact = torch.linalg.lstsq(a.t(), (w[r] @ x.t()).unsqueeze(-1)).solution.squeeze(-1)
        assert torch.allclose(w2.round_scales(exact.clamp(min=0)), s[r], rtol=0.07)

    def err(scales: torch.Tensor) -> float:
        d = w - w2.dequantize(codes, scales, torch.float32)
        return float(((d @ h) * d).sum())

    assert err(s) < err(w2.quantize_rtn(w).scales())
