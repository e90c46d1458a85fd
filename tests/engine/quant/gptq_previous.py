"""The GPTQ scale rule as it was before it was made fast: the slow reference for tests and bench.

A frozen copy of ``engine.quant.gptq.gptq_quantize`` with its helpers (the ue5m3 scale search
``weighted_scales``, the least-squares ``refit_scales``, the three-factorization
``inverse_cholesky`` and the column sweep) at commit bea3d22, renamed ``*_reference``.
``tests/engine/quant/test_gptq_fast.py`` checks the fast code against it and
``bench/studies/gptq_speed.py`` times both side by side. Do not optimise this file: its
point is to stay what was measured.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from engine.codecs import w2
from engine.quant.gptq import GPTQResult, ScaleRule, _group_scales, prepare_hessian

GROUP = w2.GROUP
_SPAN = 6
_CHUNK = 1 << 24
_OUTER = (w2.CODEBOOK[2] + w2.CODEBOOK[3]) / 2


def project(x: torch.Tensor) -> torch.Tensor:
    """Nearest codebook level of ``x`` (already divided by its scale): +-1 or +-4."""
    mag = torch.where(x.abs() > _OUTER, 4.0, 1.0)
    return torch.copysign(mag, x)


class GPTQReferenceError(RuntimeError):
    """The Hessian could not be inverted even after extra dampening."""


def _candidates_reference(scales: torch.Tensor) -> torch.Tensor:
    """Stored ue5m3 values around each scale: ``[..., 2 * _SPAN + 1]`` (0 stays 0)."""
    code = w2.encode_scales(scales).to(torch.int32).unsqueeze(-1)
    steps = torch.arange(-_SPAN, _SPAN + 1, dtype=torch.int32, device=scales.device)
    cand = torch.where(code > 0, (code + steps).clamp(1, 255), torch.zeros_like(code + steps))
    return w2.decode_scales(cand.to(torch.uint8))


def weighted_scales_reference(block: torch.Tensor, imp: torch.Tensor) -> torch.Tensor:
    """Stored scales ``[out, k]`` for ``block`` ``[out, 32k]`` minimising the ``imp``-weighted
    squared error of nearest-code rounding (``imp`` ``[32k]``, non-negative)."""
    out_f, n = (int(d) for d in block.shape)
    groups = n // GROUP
    g = block.to(torch.float32).reshape(out_f, groups, GROUP)
    wt = imp.to(g.device, torch.float32).reshape(groups, GROUP, 1)
    cand = _candidates_reference(w2.rtn_scales(block))  # [out, groups, K]
    per = max(1, _CHUNK // (out_f * GROUP * cand.shape[-1]))
    best = torch.empty(out_f, groups, dtype=torch.float32, device=g.device)
    for a in range(0, groups, per):
        b = min(a + per, groups)
        c = cand[:, a:b].unsqueeze(-2)  # [out, chunk, 1, K]
        x = g[:, a:b].unsqueeze(-1)  # [out, chunk, 32, 1]
        q = project(x / torch.where(c > 0, c, 1.0)) * c
        err = ((x - q) ** 2 * wt[a:b]).sum(-2)  # [out, chunk, K]
        pick = err.argmin(-1, keepdim=True)
        best[:, a:b] = cand[:, a:b].gather(-1, pick).squeeze(-1)
    return best


def refit_scales_reference(
    weight: torch.Tensor, hessian: torch.Tensor, codes: torch.Tensor
) -> torch.Tensor:
    """Stored scales ``[out, in/32]`` minimising ``(w - q) H (w - q)^T`` per row for fixed codes.

    Row ``r``'s dequantized weights are ``q = sum_g s_g c_g`` (``c_g``: the row's code levels on
    group ``g``, zero elsewhere), so the optimum solves ``M s = b`` with
    ``M_gh = c_g H c_h^T`` and ``b_g = c_g H w^T``. A negative solution (possible when the codes
    disagree with the weights) is clipped to 0.
    """
    out_f, in_f = (int(d) for d in weight.shape)
    groups = in_f // GROUP
    w = weight.to(torch.float32)
    h = hessian.to(w.device, torch.float32)
    h_blocks = h.reshape(in_f, groups, GROUP)
    c_all = w2.code_values(codes.to(w.device))
    b_all = ((w @ h) * c_all).reshape(out_f, groups, GROUP).sum(-1)
    eye = torch.eye(groups, dtype=torch.float32, device=w.device)
    out = torch.empty(out_f, groups, dtype=torch.float32, device=w.device)
    rows = max(1, _CHUNK // (in_f * groups))
    for a in range(0, out_f, rows):
        b = min(a + rows, out_f)
        cg = c_all[a:b].reshape(b - a, groups, GROUP)
        hc = torch.einsum("jhb,rhb->rjh", h_blocks, cg)  # [r, in, groups]: H c_h^T
        m = torch.einsum("rga,rgah->rgh", cg, hc.reshape(b - a, groups, GROUP, groups))
        ridge = 1e-6 * torch.diagonal(m, dim1=1, dim2=2).mean(-1).clamp(min=1e-30)
        m = m + ridge[:, None, None] * eye
        out[a:b] = torch.linalg.solve(m, b_all[a:b].unsqueeze(-1)).squeeze(-1)
    return w2.round_scales(out.clamp(min=0.0))


def inverse_cholesky_reference(
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
    raise GPTQReferenceError(
        f"Hessian is not positive definite even with dampening {used + extra:g}"
    )


def gptq_quantize_reference(
    weight: torch.Tensor,
    hessian: torch.Tensor,
    *,
    damp: float = 0.01,
    blocksize: int = 128,
    act_order: bool = False,
    scales: ScaleRule = "weighted",
    refit: int = 1,
) -> GPTQResult:
    """Quantize ``weight`` ``[out, in]`` to W2 codes minimising ``||(W - Q) X||``.

    ``hessian`` is ``[in, in]`` (e.g. from :class:`HessianAccumulator`). Runs on
    ``weight``'s device. ``blocksize`` must be a multiple of 32. ``scales`` picks the group
    scale rule (``"weighted"``: :func:`engine.quant.w2_scales.weighted_scales` with GPTQ's
    column costs; ``"rtn"``: the plain RTN rule). ``refit`` rounds of: least-squares scales for
    the codes found (:func:`engine.quant.w2_scales.refit_scales`), then GPTQ again with those
    scales fixed; the result with the lowest ``tr(ΔW H ΔWᵀ)`` is kept.
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
    if tuple(hessian.shape) != (in_f, in_f):
        raise ValueError(f"Hessian shape {tuple(hessian.shape)} does not match in={in_f}")
    device = weight.device
    W = weight.to(torch.float32).clone()
    H, dead = prepare_hessian(hessian.to(device), damp)
    W[:, dead] = 0.0

    perm: torch.Tensor | None = None
    if act_order:
        perm = torch.argsort(torch.diagonal(H), descending=True)
        Hinv, damp_used = inverse_cholesky_reference(H[perm][:, perm], damp)
    else:
        Hinv, damp_used = inverse_cholesky_reference(H, damp)
    # GPTQ's cost of column j's rounding error is (error / U_jj)^2: the scale search's weights.
    imp = 1.0 / torch.diagonal(Hinv) ** 2
    if perm is not None:
        imp = imp[torch.argsort(perm)]

    def rule(block: torch.Tensor, cols: slice) -> torch.Tensor:
        if scales == "weighted":
            return weighted_scales_reference(block, imp[cols])
        return _group_scales(block)

    # Act-order visits a group's columns at scattered times, so its scales are fixed up front
    # from the original weights ("static groups"); groups stay 32 contiguous inputs.
    fixed = rule(W, slice(None)) if act_order else None
    best = _gptq_pass_reference(W, Hinv, perm, fixed, rule, blocksize)
    if not refit:
        return GPTQResult(best[0], best[1], damp_used, lambda: best[2])
    best_loss = _loss_reference(W, H, best[0], best[1])
    for _ in range(refit):
        s = refit_scales_reference(W, H, best[0])
        found = min(
            ((best[0], s), _gptq_pass_reference(W, Hinv, perm, s, rule, blocksize)[:2]),
            key=lambda cs: _loss_reference(W, H, cs[0], cs[1]),
        )
        loss = _loss_reference(W, H, found[0], found[1])
        if loss >= best_loss:
            break
        best, best_loss = (found[0], found[1], loss), loss
    return GPTQResult(best[0], best[1], damp_used, lambda: best_loss)


def _loss_reference(
    w: torch.Tensor, h: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor
) -> float:
    """GPTQ's objective ``tr(ΔW H ΔWᵀ) / 2`` (equal to the column loop's summed loss)."""
    delta = w - w2.dequantize(codes, scales, torch.float32)
    return float(((delta @ h) * delta).sum()) / 2.0


def _gptq_pass_reference(
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
    inv_d = (1.0 / torch.diagonal(Hinv)).tolist()
    loss = 0.0

    for b1 in range(0, in_f, blocksize):
        b2 = min(b1 + blocksize, in_f)
        Err1 = torch.empty(b2 - b1, out_f, dtype=torch.float32, device=device)
        for g1 in range(b1, b2, GROUP):
            g2 = g1 + GROUP
            if fixed is None:
                g = g1 // GROUP
                St[g] = rule(Wt[g1:g2].t(), slice(g1, g2)).squeeze(1)
                inv_St[g] = torch.where(St[g] > 0, 1.0 / St[g], 0.0)
            Hg = Hinv[g1:g2, g1:g2]
            for col in range(g1, g2):
                g = group_of[col] if perm is not None else col // GROUP
                w = Wt[col]
                q = project(w * inv_St[g]) * St[g]
                Qt[col] = q
                err = (w - q) * inv_d[col]
                Err1[col - b1] = err
                # Spread the error over the rest of this group right away.
                Wt[col + 1 : g2].addr_(Hg[col - g1, col - g1 + 1 :], err, alpha=-1.0)
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
