"""Choosing W2 group scales for GPTQ by the error GPTQ actually pays, not the weight error.

The RTN rule (:func:`engine.codecs.w2.rtn_scales`) minimises each group's plain squared weight
error and then rounds the scale to ue5m3 (3 mantissa bits: neighbouring stored values are up to
12.5% apart). Inside GPTQ two things are better:

* :func:`weighted_scales`: among the stored ue5m3 values around the RTN scale, the one whose
  nearest-code rounding minimises ``sum_j imp_j (w_j - q_j)^2``. GPTQ passes
  ``imp_j = 1 / U_jj^2`` (``U`` the upper Cholesky factor of ``H^-1``): the cost of column
  ``j``'s rounding error once the later columns have absorbed what they can.
* :func:`refit_scales`: with the codes fixed, the scales of one output row that minimise the
  Hessian-weighted error ``(w - q) H (w - q)^T`` exactly (a small linear system per row,
  one unknown per group), then rounded to ue5m3.

Both return scales exactly representable in the file (``round_scales``), so the on-disk format
does not change.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.codecs import w2

GROUP = w2.GROUP
_OUTER = (w2.CODEBOOK[2] + w2.CODEBOOK[3]) / 2  # 2.5: threshold between levels 1 and 4
# Candidate ue5m3 codes either side of the RTN scale's: +-6 steps is about +-0.7 octave.
_SPAN = 6
# Elements per temporary in the vectorised searches (bounds memory on GLM-wide matrices).
_CHUNK = 1 << 24


def project(x: torch.Tensor) -> torch.Tensor:
    """Nearest codebook level of ``x`` (already divided by its scale): +-1 or +-4.

    A zero maps to +1; GPTQ's error feedback absorbs the choice, and an all-zero group
    (scale 0) dequantizes to 0 either way.
    """
    mag = torch.where(x.abs() > _OUTER, 4.0, 1.0)
    return torch.copysign(mag, x)


def _candidates(scales: torch.Tensor) -> torch.Tensor:
    """Stored ue5m3 values around each scale: ``[..., 2 * _SPAN + 1]`` (0 stays 0)."""
    code = w2.encode_scales(scales).to(torch.int32).unsqueeze(-1)
    steps = torch.arange(-_SPAN, _SPAN + 1, dtype=torch.int32, device=scales.device)
    cand = torch.where(code > 0, (code + steps).clamp(1, 255), torch.zeros_like(code + steps))
    return w2.decode_scales(cand.to(torch.uint8))


def _level4_threshold(cand: torch.Tensor) -> torch.Tensor:
    """Smallest float32 ``a`` with ``fl(a / c) > 2.5`` for each candidate ``c > 0``.

    :func:`project` sends ``|w| / c`` to level 4 exactly from this magnitude on. It lies
    within an ulp or two of ``fl(2.5 c)`` (one ulp above it for ue5m3 values, where
    ``2.5 c`` is exact), so the smallest of its neighbours that passes the test is it.
    """
    base = (cand * _OUTER).view(torch.int32)
    found = torch.full_like(cand, float("inf"))
    for step in range(3, -4, -1):  # from above: the last neighbour that passes is the smallest
        a = (base + step).view(torch.float32)
        found = torch.where(a / cand > _OUTER, a, found)
    return found


def weighted_scales(block: torch.Tensor, imp: torch.Tensor) -> torch.Tensor:
    """Stored scales ``[out, k]`` for ``block`` ``[out, 32k]`` minimising the ``imp``-weighted
    squared error of nearest-code rounding (``imp`` ``[32k]``, non-negative).

    A candidate scale ``c`` puts the weights with ``|w| / c > 2.5`` at level 4 and the rest at
    level 1, so its error is a quadratic in ``c``:
    ``sum imp w^2 - 2 c sum imp |w| m + c^2 sum imp m^2`` (``m`` in {1, 4}). Each weight is
    binned by how many of its group's (increasing) candidates send it to level 4, using the
    exact test :func:`project` applies; suffix sums over the bins give every candidate's
    sums at once. The terms cancel (the error is a fraction of ``sum imp w^2``), so they are
    in float64. Rows are done in chunks to bound memory.
    """
    out_f, n = (int(d) for d in block.shape)
    groups = n // GROUP
    wt = imp.to(block.device, torch.float64).reshape(1, groups, GROUP)
    best = torch.empty(out_f, groups, dtype=torch.float32, device=block.device)
    rows = max(1, _CHUNK // (4 * n))
    for a in range(0, out_f, rows):
        b = min(a + rows, out_f)
        best[a:b] = _weighted_rows(block[a:b], wt)
    return best


def _weighted_rows(block: torch.Tensor, wt: torch.Tensor) -> torch.Tensor:
    out_f, n = (int(d) for d in block.shape)
    groups = n // GROUP
    mags = block.to(torch.float32).reshape(out_f, groups, GROUP).abs().contiguous()
    cand = _candidates(w2.rtn_scales(block))  # [out, groups, K]; a group's are all 0 or all > 0
    live = cand > 0
    c = torch.where(live, cand, 1.0)
    k = int(cand.shape[-1])
    bins = torch.searchsorted(_level4_threshold(c), mags, right=True)  # [out, groups, 32]
    m64 = mags.to(torch.float64)
    wm = wt * m64
    sq = (wm * m64).sum(-1, keepdim=True)  # sum imp w^2

    def above(x: torch.Tensor) -> torch.Tensor:
        """Per candidate, the sum of ``x`` over the weights it puts at level 4."""
        hist = torch.zeros(out_f, groups, k + 1, dtype=torch.float64, device=block.device)
        hist.scatter_add_(-1, bins, x.expand_as(m64))
        return hist.flip(-1).cumsum(-1).flip(-1)[..., 1:]  # bins > candidate index

    lv4 = w2.CODEBOOK[3] / w2.CODEBOOK[2]  # the outer level in units of the inner one
    cross = wm.sum(-1, keepdim=True) + (lv4 - 1) * above(wm)  # sum imp |w| m
    norm = wt.sum(-1, keepdim=True) + (lv4 * lv4 - 1) * above(wt)  # sum imp m^2
    c64 = c.to(torch.float64)
    err = sq - 2 * c64 * cross + c64 * c64 * norm
    pick = err.argmin(-1, keepdim=True)
    return torch.where(live[..., 0], cand.gather(-1, pick).squeeze(-1), 0.0)


def _code_gram(codes: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """``M[r, g, h] = c_rg H_gh c_rh^T`` ``[rows, groups, groups]`` for code levels ``codes``.

    One GEMM per group ``g`` over the rows at once (``c_g`` times ``H``'s rows of ``g``, for
    the columns from ``g`` on: ``M`` is symmetric), multiplied in place by the codes and summed
    per group; the lower triangle is copied from the upper one.
    """
    out_f, in_f = (int(d) for d in codes.shape)
    groups = in_f // GROUP
    cg = codes.reshape(out_f, groups, GROUP)
    m = torch.zeros(out_f, groups, groups, dtype=torch.float32, device=codes.device)
    buf = torch.empty(out_f * in_f, dtype=torch.float32, device=codes.device)
    for g in range(groups):
        lo, rest = g * GROUP, in_f - g * GROUP
        t = buf[: out_f * rest].view(out_f, rest)
        torch.mm(cg[:, g], h[lo : lo + GROUP, lo:], out=t)  # c_g H_g,>=g
        t.mul_(codes[:, lo:])
        torch.sum(t.view(out_f, groups - g, GROUP), -1, out=m[:, g, g:])
        m[:, g + 1 :, g] = m[:, g, g + 1 :]
    return m


@dataclass(frozen=True)
class Refit:
    """The least-squares scales for fixed codes, and estimates of ``tr(ΔW H ΔWᵀ) / 2`` for
    them and for other scales on the same codes.

    With ``M`` and ``b`` of :func:`refit` and ``base = Σ_r w H wᵀ`` the loss of scales ``s``
    is ``(base - 2 Σ s·b + Σ sᵀ M s) / 2`` (float64), with no further ``[out, in] x [in, in]``
    product. ``base`` is many times the loss, so the form cancels: it agrees with the exact
    loss to about 1e-7 relative; it ranks candidates, it is not returned as the loss.
    """

    scales: torch.Tensor
    loss_estimate: float
    others: tuple[float, ...]
    base: float  # tr(W H Wᵀ)


# How far apart two loss estimates must be to be ranked without the exact losses.
LOSS_ESTIMATE_RTOL = 1e-4


def refit(
    weight: torch.Tensor,
    hessian: torch.Tensor,
    codes: torch.Tensor,
    others: tuple[torch.Tensor, ...] = (),
) -> Refit:
    """Stored scales ``[out, in/32]`` minimising ``(w - q) H (w - q)^T`` per row for fixed codes.

    Row ``r``'s dequantized weights are ``q = sum_g s_g c_g`` (``c_g``: the row's code levels on
    group ``g``, zero elsewhere), so the optimum solves ``M s = b`` with
    ``M_gh = c_g H c_h^T`` and ``b_g = c_g H w^T``. A negative solution (possible when the codes
    disagree with the weights) is clipped to 0. Done in chunks of rows, which bounds memory;
    ``others``: scales whose loss on these codes is estimated too.
    """
    out_f, in_f = (int(d) for d in weight.shape)
    groups = in_f // GROUP
    w = weight.to(torch.float32)
    h = hessian.to(w.device, torch.float32)
    c_all = w2.code_values(codes.to(w.device))
    scales = torch.empty(out_f, groups, dtype=torch.float32, device=w.device)
    totals = [0.0] * (1 + len(others))
    base_total = 0.0
    rows = max(1, (_CHUNK // 4) // (groups * groups))
    for a in range(0, out_f, rows):
        b = min(a + rows, out_f)
        wh = w[a:b] @ h
        cross = (wh * c_all[a:b]).reshape(b - a, groups, GROUP).sum(-1)
        base = float((wh.to(torch.float64) * w[a:b].to(torch.float64)).sum())
        base_total += base
        m = _code_gram(c_all[a:b], h)
        ridge = 1e-6 * torch.diagonal(m, dim1=1, dim2=2).mean(-1).clamp(min=1e-30)
        fitted = m.clone()
        fitted.diagonal(dim1=1, dim2=2).add_(ridge[:, None])
        solved = torch.linalg.solve(fitted, cross.unsqueeze(-1)).squeeze(-1)
        del fitted
        scales[a:b] = w2.round_scales(solved.clamp(min=0.0))
        m64, cross64 = m.to(torch.float64), cross.to(torch.float64)
        for k, s in enumerate((scales, *others)):
            s64 = s[a:b].to(w.device, torch.float64)
            quad = float(torch.einsum("rg,rgh,rh->", s64, m64, s64))
            totals[k] += (base - 2.0 * float((s64 * cross64).sum()) + quad) / 2.0
    return Refit(scales, totals[0], tuple(totals[1:]), base_total)


def refit_scales(weight: torch.Tensor, hessian: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """The scales of :func:`refit` alone."""
    return refit(weight, hessian, codes).scales
