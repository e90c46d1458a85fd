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


def weighted_scales(block: torch.Tensor, imp: torch.Tensor) -> torch.Tensor:
    """Stored scales ``[out, k]`` for ``block`` ``[out, 32k]`` minimising the ``imp``-weighted
    squared error of nearest-code rounding (``imp`` ``[32k]``, non-negative)."""
    out_f, n = (int(d) for d in block.shape)
    groups = n // GROUP
    g = block.to(torch.float32).reshape(out_f, groups, GROUP)
    wt = imp.to(g.device, torch.float32).reshape(groups, GROUP, 1)
    cand = _candidates(w2.rtn_scales(block))  # [out, groups, K]
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


def refit_scales(weight: torch.Tensor, hessian: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
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
