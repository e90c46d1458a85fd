"""GPTQ for the W2 codec: 4-level codebook ``{-4, -1, 1, 4}``, one scale per 32 inputs.

The algorithm (Frantar et al., "GPTQ", 2022) quantizes one input column at a
time and spreads each column's error over the columns not yet quantized,
weighted by the inverse Hessian ``H = 2 X Xᵀ`` of the layer's real inputs:

* dead inputs (``H_ii == 0``) get ``H_ii = 1`` and a zeroed weight column;
* dampening adds ``damp * mean(diag H)`` to the diagonal;
* ``Hinv`` is the upper Cholesky factor of ``H⁻¹`` (Cholesky, inverse, Cholesky);
* updates are lazy at two levels: within a 32-column group every column updates
  the rest of its group, after each group the rest of the block is updated by one
  small GEMM, after each block the rest of the matrix by one large GEMM. The
  arithmetic is the textbook column loop's; only the order of the additions moves.

Scales: without act-order a group's scale is fixed when the group starts, from
the *error-updated* weights of that group; with act-order (columns visited by
decreasing ``H_ii``) the groups would be scattered, so scales are fixed up front
from the original weights ("static groups"): groups stay 32 contiguous inputs
and the on-disk layout is unchanged. The rule is either the W2 round-to-nearest
one (``scales="rtn"``, :func:`engine.codecs.w2.rtn_scales`, rounded to ue5m3) or,
the default, the ue5m3 value minimising the rounding error weighted by GPTQ's
column costs (``scales="weighted"``). Then ``refit`` rounds (default 1): the
least-squares scales for the codes found, under the full Hessian, and one more
GPTQ sweep with those scales fixed; the lowest ``tr(ΔW H ΔWᵀ)`` wins
(:mod:`engine.quant.w2_scales`).

:func:`gptq_reference` is the plain unblocked loop, kept for tests and for the
speed benchmark.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import torch

from engine.codecs import w2
from engine.quant.w2_scales import _OUTER, LOSS_ESTIMATE_RTOL, project, weighted_scales
from engine.quant.w2_scales import refit as refit_scales_of

GROUP = w2.GROUP
ScaleRule = Literal["weighted", "rtn"]


class GPTQError(RuntimeError):
    """The Hessian could not be inverted even after extra dampening."""


class HessianAccumulator:
    """Running mean of ``2 x xᵀ`` over input rows, kept in float32.

    ``add`` may be called with any number of rows; the result is the same as
    one call with all of them (up to rounding).
    """

    def __init__(self, dim: int, device: torch.device | str | None = None) -> None:
        self.dim = dim
        self.hessian = torch.zeros(dim, dim, dtype=torch.float32, device=device)
        self.count = 0

    def add(self, x: torch.Tensor) -> None:
        rows = x.reshape(-1, self.dim).to(self.hessian.device, torch.float32)
        n = int(rows.shape[0])
        if n == 0:
            return
        total = self.count + n
        self.hessian.mul_(self.count / total)
        rows = rows * math.sqrt(2.0 / total)
        self.hessian.addmm_(rows.t(), rows)
        self.count = total

    def merge(self, other: HessianAccumulator) -> None:
        """Fold another accumulator's rows into this one."""
        total = self.count + other.count
        if total == 0:
            return
        self.hessian.mul_(self.count / total).add_(other.hessian, alpha=other.count / total)
        self.count = total


@dataclass(frozen=True)
class GPTQResult:
    """Codes ``[out, in]`` (uint8 0..3), the stored scales and the GPTQ loss.

    ``loss`` is computed when first read (after a refit it costs one ``[out, in] x [in, in]``
    product, which the converter, reading only the codes and scales, does not pay).
    """

    codes: torch.Tensor
    scales: torch.Tensor  # float32 [out, in/32], exactly representable as ue5m3
    damp_used: float
    loss_of: Callable[[], float] = field(repr=False, compare=False)
    output_error_of: Callable[[], float] | None = field(default=None, repr=False, compare=False)

    @functools.cached_property
    def loss(self) -> float:
        return self.loss_of()

    @functools.cached_property
    def output_error(self) -> float:
        """:func:`output_error` of the result against the weight and the undampened Hessian,
        from the loss and ``tr(W H Wᵀ)`` GPTQ already has where it can (no product)."""
        if self.output_error_of is None:
            raise ValueError("this result was made without its output error")
        return self.output_error_of()

    def to_w2(self) -> w2.W2Tensor:
        return w2.W2Tensor.from_codes(self.codes.cpu(), w2.encode_scales(self.scales.cpu()))

    def dequantize(self) -> torch.Tensor:
        return w2.dequantize(self.codes, self.scales, torch.float32)


def _group_scales(block: torch.Tensor) -> torch.Tensor:
    """The stored scale(s) the RTN rule picks for ``block`` ``[out, 32k]``."""
    return w2.round_scales(w2.rtn_scales(block))


def prepare_hessian(hessian: torch.Tensor, damp: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Dead-column fix and dampening; returns (H, dead mask). Does not modify its input."""
    h = hessian.to(torch.float32).clone()
    diag = torch.diagonal(h)
    dead = diag == 0
    diag[dead] = 1.0
    diag.add_(damp * float(diag.mean()))
    return h, dead


def inverse_cholesky(
    h: torch.Tensor, damp: float, *, retries: int = 4
) -> tuple[torch.Tensor, float]:
    """Upper Cholesky factor of ``H⁻¹``; on failure add more dampening (x10 each retry).

    Returns the factor and the dampening fraction finally used.
    """
    mean_diag = float(torch.diagonal(h).mean())
    extra = 0.0
    used = damp
    for attempt in range(retries + 1):
        try:
            hh = h
            if extra:
                hh = h.clone()
                torch.diagonal(hh).add_(extra * mean_diag)
            lower = torch.linalg.cholesky(hh)
            inv = torch.cholesky_inverse(lower)
            return torch.linalg.cholesky(inv, upper=True), used + extra
        except RuntimeError:  # torch.linalg.LinAlgError subclasses it
            extra = max(damp, 0.01) * (10.0 ** (attempt + 1))
    raise GPTQError(f"Hessian is not positive definite even with dampening {used + extra:g}")


@dataclass(frozen=True)
class HessianFactor:
    """A Hessian made ready for GPTQ once, for every weight that shares it (a MoE layer's
    experts all share the gate/up Hessian, so its factorization, the costliest step at GLM's
    widths after the sweeps, is paid once per layer instead of 576 times)."""

    hessian: torch.Tensor  # prepared: dead inputs' diagonal at 1, dampened
    dead: torch.Tensor  # inputs with H_ii == 0
    perm: torch.Tensor | None  # act-order's visiting order
    hinv: torch.Tensor  # upper Cholesky factor of H⁻¹ in visiting order
    imp: torch.Tensor  # 1 / U_jj², in input order: the scale search's column costs
    damp: float  # as requested
    damp_used: float  # after any extra dampening the factorization needed
    ridge: float  # what dampening added to every diagonal entry: damp * mean(diag)
    act_order: bool


def factor_hessian(
    hessian: torch.Tensor, *, damp: float = 0.01, act_order: bool = False
) -> HessianFactor:
    """Prepare ``hessian`` ``[in, in]`` for :func:`gptq_quantize` (on its device)."""
    H, dead = prepare_hessian(hessian, damp)
    ridge = damp * float(torch.where(dead, 1.0, torch.diagonal(hessian).float()).mean())
    perm: torch.Tensor | None = None
    if act_order:
        perm = torch.argsort(torch.diagonal(H), descending=True)
        Hinv, damp_used = inverse_cholesky(H[perm][:, perm], damp)
    else:
        Hinv, damp_used = inverse_cholesky(H, damp)
    # GPTQ's cost of column j's rounding error is (error / U_jj)^2: the scale search's weights.
    imp = 1.0 / torch.diagonal(Hinv) ** 2
    if perm is not None:
        imp = imp[torch.argsort(perm)]
    return HessianFactor(H, dead, perm, Hinv, imp, damp, damp_used, ridge, act_order)


def gptq_quantize(
    weight: torch.Tensor,
    hessian: torch.Tensor | HessianFactor,
    *,
    damp: float = 0.01,
    blocksize: int = 128,
    act_order: bool = False,
    scales: ScaleRule = "weighted",
    refit: int = 1,
) -> GPTQResult:
    """Quantize ``weight`` ``[out, in]`` to W2 codes minimising ``||(W - Q) X||``.

    ``hessian`` is ``[in, in]`` (e.g. from :class:`HessianAccumulator`), or its
    :func:`factor_hessian` made with the same ``damp`` and ``act_order`` on ``weight``'s
    device, where several weights share one Hessian. Runs on ``weight``'s device.
    ``blocksize`` must be a multiple of 32. ``scales`` picks the group scale rule
    (``"weighted"``: :func:`engine.quant.w2_scales.weighted_scales` with GPTQ's column costs;
    ``"rtn"``: the plain RTN rule). ``refit`` rounds of: least-squares scales for the codes
    found (:func:`engine.quant.w2_scales.refit_scales`), then GPTQ again with those scales
    fixed; the result with the lowest ``tr(ΔW H ΔWᵀ)`` is kept.
    """
    if weight.dim() != 2 or weight.shape[1] % GROUP:
        raise ValueError(
            f"GPTQ needs [out, in] with in a multiple of {GROUP}, got {tuple(weight.shape)}"
        )
    if blocksize % GROUP:
        raise ValueError(f"blocksize {blocksize} is not a multiple of {GROUP}")
    if scales not in ("weighted", "rtn"):
        raise ValueError(f"unknown scale rule {scales!r} (known: weighted, rtn)")
    if refit < 0:
        raise ValueError(f"refit must be >= 0, got {refit}")
    out_f, in_f = (int(d) for d in weight.shape)
    shape = tuple((hessian.hessian if isinstance(hessian, HessianFactor) else hessian).shape)
    if shape != (in_f, in_f):
        raise ValueError(f"Hessian shape {shape} does not match in={in_f}")
    device = weight.device
    if isinstance(hessian, HessianFactor):
        factor = hessian
        if (factor.damp, factor.act_order) != (damp, act_order):
            raise ValueError(
                f"the Hessian factor was made with damp={factor.damp}, "
                f"act_order={factor.act_order}; this call asks for damp={damp}, "
                f"act_order={act_order}"
            )
        if factor.hessian.device != device:
            raise ValueError(
                f"the Hessian factor is on {factor.hessian.device}, the weight on {device}"
            )
    else:
        factor = factor_hessian(hessian.to(device), damp=damp, act_order=act_order)
    H, dead, perm, Hinv, imp = factor.hessian, factor.dead, factor.perm, factor.hinv, factor.imp
    damp_used = factor.damp_used
    W = weight.to(torch.float32).clone()
    W[:, dead] = 0.0

    def rule(block: torch.Tensor, cols: slice) -> torch.Tensor:
        if scales == "weighted":
            return weighted_scales(block, imp[cols])
        return _group_scales(block)

    # Act-order visits a group's columns at scattered times, so its scales are fixed up front
    # from the original weights ("static groups"); groups stay 32 contiguous inputs.
    fixed = rule(W, slice(None)) if act_order else None
    codes, found, loss = _gptq_pass(W, Hinv, perm, fixed, rule, blocksize)
    if not refit:
        return GPTQResult(
            codes, found, damp_used, lambda: loss, _error_of(W, factor, codes, found, loss, None)
        )
    best = _Candidate(codes, found, loss)
    base: float | None = None
    for _ in range(refit):
        fit = refit_scales_of(W, H, best.codes, (best.scales,))
        base = fit.base
        best.estimate = fit.others[0]
        same_codes = _Candidate(best.codes, fit.scales, fit.loss_estimate)
        # A sweep's own summed loss is its estimate (the identity of the docstring).
        swept = _Candidate(*_gptq_pass(W, Hinv, perm, fit.scales, rule, blocksize))
        # As before: the better of the two new candidates (the first on a tie), kept only if
        # strictly below the current best.
        new = same_codes if _no_worse(same_codes, swept, W, H) else swept
        if _no_worse(best, new, W, H):
            break
        best = new
    return GPTQResult(
        best.codes,
        best.scales,
        damp_used,
        functools.partial(best.exact, W, H),
        _error_of(W, factor, best.codes, best.scales, best.known(), base),
    )


def _error_of(
    w: torch.Tensor,
    factor: HessianFactor,
    codes: torch.Tensor,
    scales: torch.Tensor,
    loss: float | None,
    base: float | None,
) -> Callable[[], float]:
    """:func:`output_error` against the undampened Hessian, from quantities under the
    prepared one: it is the raw Hessian plus ``ridge`` on the diagonal and 1 on dead inputs'
    (whose rows are zero in the raw one, and whose weights ``w`` has zeroed), so
    ``tr(D H Dᵀ) = tr(D Hp Dᵀ) - ridge ||D||² - ||D_dead||²`` and
    ``tr(W H Wᵀ) = tr(W Hp Wᵀ) - ridge ||W||²``. ``loss`` (``tr(D Hp Dᵀ) / 2``) and ``base``
    (``tr(W Hp Wᵀ)``) are used when known and the dampening was not raised (then the sweep's
    Cholesky factor belongs to another matrix); otherwise they are computed."""

    def error() -> float:
        h = factor.hessian
        known = factor.damp_used == factor.damp
        num = 2.0 * (loss if known and loss is not None else _loss(w, h, codes, scales))
        den = base if known and base is not None else float(((w @ h) * w).sum())
        delta = w - w2.dequantize(codes, scales, torch.float32)
        num -= factor.ridge * float((delta * delta).sum())
        num -= float((delta[:, factor.dead] ** 2).sum())
        den -= factor.ridge * float((w * w).sum())
        return math.sqrt(max(num, 0.0) / den) if den > 0 else 0.0

    return error


class _Candidate:
    """Codes and scales with an estimate of their loss (a sweep's summed loss, or from a
    refit's Gram matrices) and, computed once when a comparison needs it, the exact one."""

    def __init__(
        self, codes: torch.Tensor, scales: torch.Tensor, estimate: float | None = None
    ) -> None:
        self.codes, self.scales, self.estimate = codes, scales, estimate
        self._exact: float | None = None

    def exact(self, w: torch.Tensor, h: torch.Tensor) -> float:
        if self._exact is None:
            self._exact = _loss(w, h, self.codes, self.scales)
        return self._exact

    def known(self) -> float | None:
        """The exact loss if computed, else the estimate."""
        return self._exact if self._exact is not None else self.estimate


def _no_worse(a: _Candidate, b: _Candidate, w: torch.Tensor, h: torch.Tensor) -> bool:
    """``loss(a) <= loss(b)``, from the estimates when they are far enough apart to decide
    (they agree with the exact loss to about 1e-7 relative, the margin is 1e-4), else from
    the exact losses: the same answer as computing both exactly."""
    x, y = a.known(), b.known()
    if x is not None and y is not None and abs(x - y) > LOSS_ESTIMATE_RTOL * max(abs(x), abs(y)):
        return x <= y
    return a.exact(w, h) <= b.exact(w, h)


def _loss(w: torch.Tensor, h: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor) -> float:
    """GPTQ's objective ``tr(ΔW H ΔWᵀ) / 2`` (equal to the column loop's summed loss)."""
    delta = w - w2.dequantize(codes, scales, torch.float32)
    return float(((delta @ h) * delta).sum()) / 2.0


def _gptq_pass(
    W: torch.Tensor,
    Hinv: torch.Tensor,
    perm: torch.Tensor | None,
    fixed: torch.Tensor | None,
    rule: Callable[[torch.Tensor, slice], torch.Tensor],
    blocksize: int,
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """One GPTQ sweep over ``W`` (not modified): codes, scales and the summed loss.

    ``Hinv`` is the Cholesky factor in visiting order (``perm``); ``fixed`` scales are used as
    given, else each group's scale is chosen by ``rule`` when the group starts.
    """
    device = W.device
    out_f, in_f = (int(d) for d in W.shape)
    group_of: list[int] = (perm // GROUP).tolist() if perm is not None else []
    # Work on transposed copies: input column i of W is the contiguous row Wt[i],
    # so every per-column read and rank-1 update touches contiguous memory.
    Wt = (W[:, perm] if perm is not None else W).t().contiguous()
    Qt = torch.empty_like(Wt)
    if fixed is not None:
        St = fixed.t().contiguous()  # [groups, out]
    else:
        St = torch.zeros(in_f // GROUP, out_f, dtype=torch.float32, device=device)
    inv_St = torch.where(St > 0, 1.0 / St, 0.0)  # refreshed per group below
    # Row views and constants made once: the column loop then indexes Python lists, and each
    # step writes into its destination with no Python scalars to wrap (few small tensors and
    # operations per column; on a GPU, few launches).
    w_rows, q_rows = Wt.unbind(0), Qt.unbind(0)
    s_rows, inv_rows = St.unbind(0), inv_St.unbind(0)
    St4 = St * w2.CODEBOOK[3]
    s4_rows = St4.unbind(0)
    inv_d = (1.0 / torch.diagonal(Hinv)).unbind(0)
    neg_h = -Hinv
    outer = torch.tensor(_OUTER, dtype=torch.float32, device=device)
    loss = 0.0

    for b1 in range(0, in_f, blocksize):
        b2 = min(b1 + blocksize, in_f)
        Err1 = torch.empty(b2 - b1, out_f, dtype=torch.float32, device=device)
        e_rows = Err1.unbind(0)
        for g1 in range(b1, b2, GROUP):
            g2 = g1 + GROUP
            if fixed is None:
                g = g1 // GROUP
                St[g] = rule(Wt[g1:g2].t(), slice(g1, g2)).squeeze(1)
                inv_St[g] = torch.where(St[g] > 0, 1.0 / St[g], 0.0)
                St4[g] = St[g] * w2.CODEBOOK[3]
            for col in range(g1, g2):
                g = group_of[col] if perm is not None else col // GROUP
                w, q, err = w_rows[col], q_rows[col], e_rows[col - b1]
                # q = project(w / s) * s: +-4 s where |w / s| > 2.5, else +-s, the sign of
                # w / s (the same floats: 4 s and 1 s are exact).
                x = w * inv_rows[g]
                torch.copysign(torch.where(x.abs() > outer, s4_rows[g], s_rows[g]), x, out=q)
                torch.sub(w, q, out=err).mul_(inv_d[col])
                # Spread the error over the rest of this group right away.
                Wt[col + 1 : g2].addr_(neg_h[col, col + 1 : g2], err)
            # ...over the rest of the block with one GEMM per group...
            if g2 < b2:
                Wt[g2:b2].addmm_(Hinv[g1:g2, g2:b2].t(), Err1[g1 - b1 : g2 - b1], alpha=-1.0)
        loss += float((Err1 * Err1).sum())
        # ...and over the rest of the matrix with one GEMM per block.
        if b2 < in_f:
            Wt[b2:].addmm_(Hinv[b1:b2, b2:].t(), Err1, alpha=-1.0)

    Q = Qt.t()
    if perm is not None:
        Q = Q[:, torch.argsort(perm)]
    scales = St.t().contiguous()
    return w2.quantize_with_scales(Q, scales), scales, loss / 2.0


def gptq_reference(
    weight: torch.Tensor, hessian: torch.Tensor, *, damp: float = 0.01
) -> GPTQResult:
    """The textbook column loop without lazy updates (no act-order).

    Each column's error updates every remaining column of the whole matrix at
    once. Same algorithm and scale rule as :func:`gptq_quantize`; used to check
    it and as the speed benchmark's baseline.
    """
    out_f, in_f = (int(d) for d in weight.shape)
    W = weight.to(torch.float32).clone()
    H, dead = prepare_hessian(hessian.to(W.device), damp)
    W[:, dead] = 0.0
    Hinv, damp_used = inverse_cholesky(H, damp)
    scales = torch.zeros(out_f, in_f // GROUP, dtype=torch.float32, device=W.device)
    Q = torch.empty_like(W)
    loss = 0.0
    for i in range(in_f):
        if i % GROUP == 0:
            scales[:, i // GROUP] = _group_scales(W[:, i : i + GROUP]).squeeze(1)
        s = scales[:, i // GROUP]
        w = W[:, i]
        q = project(w * torch.where(s > 0, 1.0 / s, 0.0)) * s
        Q[:, i] = q
        d = Hinv[i, i]
        err = (w - q) / d
        loss += float((err * err).sum())
        W[:, i:] -= err.unsqueeze(1) * Hinv[i, i:].unsqueeze(0)
    codes = w2.quantize_with_scales(Q, scales)
    return GPTQResult(codes, scales, damp_used, lambda: loss / 2.0)


def output_error(weight: torch.Tensor, approx: torch.Tensor, hessian: torch.Tensor) -> float:
    """Relative output error ``||(W - Q) X||_F / ||W X||_F`` computed from ``H = 2 X Xᵀ / n``.

    ``tr(D H Dᵀ)`` is proportional to ``||D X||²``; the factor cancels in the ratio.
    """
    w = weight.to(torch.float32)
    h = hessian.to(w.device, torch.float32)
    delta = w - approx.to(w.device, torch.float32)
    num = float(((delta @ h) * delta).sum())
    den = float(((w @ h) * w).sum())
    return math.sqrt(max(num, 0.0) / den) if den > 0 else 0.0


def relative_frobenius(weight: torch.Tensor, approx: torch.Tensor) -> float:
    """``||W - Q||_F / ||W||_F``."""
    w = weight.to(torch.float32)
    den = float(w.norm())
    return float((w - approx.to(w.device, torch.float32)).norm()) / den if den > 0 else 0.0
