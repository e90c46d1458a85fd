# mypy: disable-error-code="no-untyped-def,untyped-decorator"
# (Triton kernel signatures are read by Triton; Python annotations there would change them.)
"""Decode GEMV straight from the 12-bit BF16 packing: ``y = x @ W.T`` with W in P12 form.

Non-expert weights set the decode ceiling (they are read for every token), so reading 12 bits
per weight instead of 16 is worth doing inside the GEMV rather than unpacking first. The
kernel decodes each weight in registers as if its exponent were in the table; the few escaped
weights were stored with index 0, so afterwards their error ``x[k] * (true - decoded)`` is
added to ``y`` by a sparse update. Layout: ``kernels.p12_layout``.
"""

from __future__ import annotations

import torch

from kernels._triton import HAVE_TRITON, launchable, tl, triton
from kernels.p12_layout import TABLE_SIZE, num_pairs, p12_unpack_reference, payload_nbytes

__all__ = ["p12_gemv", "p12_gemv_reference"]


def p12_gemv_reference(
    x: torch.Tensor,
    payload: torch.Tensor,
    exponents: torch.Tensor,
    escape_index: torch.Tensor,
    escape_values: torch.Tensor,
    shape: tuple[int, int],
) -> torch.Tensor:
    """Reference: unpack W ``[out, in]`` and compute ``x @ W.T`` in float32."""
    out_f, in_f = shape
    w = p12_unpack_reference(payload, exponents, escape_index, escape_values, out_f * in_f)
    return (x.to(torch.float32) @ w.reshape(out_f, in_f).to(torch.float32).T).to(x.dtype)


if HAVE_TRITON:

    @triton.jit
    def _p12_gemv_kernel(
        x_ptr,
        payload_ptr,
        table_ptr,
        y_ptr,
        n_rows,
        in_features,
        index_plane,
        stride_xm,
        stride_ym,
        BLOCK_R: tl.constexpr,
        BLOCK_K: tl.constexpr,
    ):
        rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
        m = tl.program_id(1)
        row_ok = rows < n_rows
        acc = tl.zeros([BLOCK_R], dtype=tl.float32)
        for k0 in range(0, in_features, BLOCK_K):
            cols = k0 + tl.arange(0, BLOCK_K)
            mask = row_ok[:, None] & (cols[None, :] < in_features)
            flat = rows[:, None].to(tl.int64) * in_features + cols[None, :]
            sign_mant = tl.load(payload_ptr + flat, mask=mask, other=0).to(tl.int32)
            nib = tl.load(payload_ptr + index_plane + flat // 2, mask=mask, other=0).to(tl.int32)
            idx = (nib >> ((flat % 2) * 4).to(tl.int32)) & 0xF
            exp = tl.load(table_ptr + idx, mask=mask, other=0).to(tl.int32)
            # bf16 -> fp32 is exact: the bf16 pattern in the top half of an fp32 word.
            bits = ((sign_mant & 0x80) << 24) | (exp << 23) | ((sign_mant & 0x7F) << 16)
            w = bits.to(tl.float32, bitcast=True)
            w = tl.where(mask, w, 0.0)
            x = tl.load(x_ptr + m * stride_xm + cols, mask=cols < in_features, other=0.0)
            acc += tl.sum(w * x.to(tl.float32)[None, :], 1)
        tl.store(y_ptr + m * stride_ym + rows, acc.to(y_ptr.dtype.element_ty), mask=row_ok)


def _escape_correction(
    x: torch.Tensor,
    payload: torch.Tensor,
    exponents: torch.Tensor,
    escape_index: torch.Tensor,
    escape_values: torch.Tensor,
    in_f: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of the escapes and ``x[:, col] * (true - decoded-with-index-0)`` per escape."""
    idx = escape_index.to(x.device).long()
    sign_mant = payload.to(x.device)[idx].to(torch.int32)
    # The table's first exponent stays on the device: reading it here would sync the host.
    first = exponents.to(x.device)[0].to(torch.int32)
    wrong = ((sign_mant & 0x80) << 8) | (first << 7) | (sign_mant & 0x7F)
    wrong_f = (wrong << 16).view(torch.float32)
    true_f = (escape_values.to(x.device).view(torch.int16).to(torch.int32) << 16).view(
        torch.float32
    )
    cols = idx % in_f
    return idx // in_f, x.to(torch.float32)[:, cols] * (true_f - wrong_f)


def p12_gemv(
    x: torch.Tensor,
    payload: torch.Tensor,
    exponents: torch.Tensor,
    escape_index: torch.Tensor,
    escape_values: torch.Tensor,
    shape: tuple[int, int],
    block_r: int = 16,
    block_k: int = 64,
) -> torch.Tensor:
    """``y = x @ W.T`` for ``x [m, in]`` and W ``[out, in]`` packed as P12 (fp32 accumulation).

    Falls back to ``p12_gemv_reference`` where Triton cannot run (see ``kernels._triton``).
    """
    out_f, in_f = shape
    if payload.dtype != torch.uint8 or payload.numel() != payload_nbytes(out_f * in_f):
        raise ValueError(f"payload must be {payload_nbytes(out_f * in_f)} uint8 bytes")
    if exponents.dtype != torch.uint8 or exponents.numel() != TABLE_SIZE:
        raise ValueError("exponent table must be 16 uint8 values")
    if x.dim() != 2 or x.shape[1] != in_f:
        raise ValueError(f"x must be [m, {in_f}], got {tuple(x.shape)}")
    if not HAVE_TRITON or not launchable(_p12_gemv_kernel, x.device):
        return p12_gemv_reference(x, payload, exponents, escape_index, escape_values, shape)
    x = x.contiguous()
    y = torch.empty(x.shape[0], out_f, dtype=torch.float32, device=x.device)
    grid = (triton.cdiv(out_f, block_r), x.shape[0])
    _p12_gemv_kernel[grid](
        x,
        payload.contiguous(),
        exponents.to(x.device).contiguous(),
        y,
        out_f,
        in_f,
        2 * num_pairs(out_f * in_f),
        x.stride(0),
        y.stride(0),
        BLOCK_R=block_r,
        BLOCK_K=block_k,
    )
    if escape_index.numel():
        rows, delta = _escape_correction(x, payload, exponents, escape_index, escape_values, in_f)
        y.index_add_(1, rows, delta)
    return y.to(x.dtype)
