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

__all__ = ["BLOCK_K", "BLOCK_M", "BLOCK_R", "p12_gemv", "p12_gemv_reference"]

#: Rows of ``x`` per program: ``tl.dot``'s least M; a verify step's 8 rows share one read.
BLOCK_M = 16
#: Weight rows per program: 256 programs for a 4096-row matrix (5 per SM on GB10's 48).
BLOCK_R = 16
#: K per step: 256 sign/mantissa bytes and 128 index bytes per row, so each of 4 warps'
#: threads issues 128-bit loads (16 x 256 + 16 x 128 bytes over 128 threads).
BLOCK_K = 256
#: K per step for float32 x (a check harness's case; the engine's x is bf16): at 256 the
#: float32 tiles spilled.
BLOCK_K_FP32 = 64
NUM_WARPS = 4


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
        m_rows,
        n_rows,
        in_features,
        index_plane,
        stride_xm,
        stride_ym,
        IEEE: tl.constexpr,
        EVEN_K: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_R: tl.constexpr,
        BLOCK_K: tl.constexpr,
    ):
        rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
        xm = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n_rows
        # The 16 exponents as 4 little-endian words (byte i of word w is entry 4w + i): one
        # 128-bit load per program, then each entry is 3 selects and a shift away.
        q = tl.arange(0, 4)
        words = tl.load(table_ptr.to(tl.pointer_type(tl.int32)) + q)
        t0 = tl.sum(tl.where(q == 0, words, 0), 0)
        t1 = tl.sum(tl.where(q == 1, words, 0), 0)
        t2 = tl.sum(tl.where(q == 2, words, 0), 0)
        t3 = tl.sum(tl.where(q == 3, words, 0), 0)
        # Row r's values start at flat r * in_features in the sign/mantissa plane and at
        # r * in_features / 2 in the index plane (in_features is even: see p12_gemv). With
        # in_features % BLOCK_K == 0 the hints let each thread's loads be 128-bit.
        row_len = in_features
        half_len = in_features // 2
        if EVEN_K:
            row_len = tl.multiple_of(row_len, BLOCK_K)
            half_len = tl.multiple_of(half_len, BLOCK_K // 2)
            index_plane = tl.multiple_of(index_plane, BLOCK_K // 2)
        sm_rows = payload_ptr + rows.to(tl.int64)[:, None] * row_len
        ix_rows = payload_ptr + index_plane + rows.to(tl.int64)[:, None] * half_len
        x_rows = x_ptr + xm.to(tl.int64)[:, None] * stride_xm
        acc = tl.zeros([BLOCK_M, BLOCK_R], dtype=tl.float32)
        for k0 in range(0, in_features, BLOCK_K):
            cols = k0 + tl.arange(0, BLOCK_K)
            half = k0 // 2 + tl.arange(0, BLOCK_K // 2)
            if EVEN_K:
                w_ok = row_ok[:, None]
                i_ok = row_ok[:, None]
                x_ok = (xm < m_rows)[:, None]
            else:
                w_ok = row_ok[:, None] & (cols < in_features)[None, :]
                i_ok = row_ok[:, None] & (half < in_features // 2)[None, :]
                x_ok = (xm < m_rows)[:, None] & (cols < in_features)[None, :]
            sign_mant = tl.load(sm_rows + cols[None, :], mask=w_ok, other=0).to(tl.int32)
            pair = tl.load(ix_rows + half[None, :], mask=i_ok, other=0).to(tl.int32)
            idx = tl.interleave(pair & 0xF, pair >> 4)  # even column in the low nibble
            word = tl.where(
                idx >= 8, tl.where((idx & 4) != 0, t3, t2), tl.where((idx & 4) != 0, t1, t0)
            )
            exp = (word >> ((idx & 3) * 8)) & 0xFF
            # bf16 bits: sign, table exponent, mantissa; exact in any wider float.
            bits = ((sign_mant & 0x80) << 8) | (exp << 7) | (sign_mant & 0x7F)
            w = bits.to(tl.int16).to(tl.bfloat16, bitcast=True)
            a = tl.load(x_rows + cols[None, :], mask=x_ok, other=0.0)
            if IEEE:  # float32 x: three TF32 products (split hi/lo), about float32 accuracy
                acc = tl.dot(
                    a.to(tl.float32), tl.trans(w.to(tl.float32)), acc, input_precision="tf32x3"
                )
            else:
                acc = tl.dot(a, tl.trans(w.to(a.dtype)), acc)
        out = y_ptr + xm.to(tl.int64)[:, None] * stride_ym + rows[None, :]
        tl.store(out, acc, mask=(xm < m_rows)[:, None] & row_ok[None, :])


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
    block_r: int = BLOCK_R,
    block_k: int = BLOCK_K,
) -> torch.Tensor:
    """``y = x @ W.T`` for ``x [m, in]`` and W ``[out, in]`` packed as P12 (fp32 accumulation).

    One program per ``block_r`` weight rows and 16 rows of ``x``: up to 16 rows (an 8-token
    verify step) read the weights once. Falls back to ``p12_gemv_reference`` where Triton
    cannot run (see ``kernels._triton``) and for an odd ``in`` (a row would start inside an
    index byte; no linear layer has one).
    """
    out_f, in_f = shape
    if payload.dtype != torch.uint8 or payload.numel() != payload_nbytes(out_f * in_f):
        raise ValueError(f"payload must be {payload_nbytes(out_f * in_f)} uint8 bytes")
    if exponents.dtype != torch.uint8 or exponents.numel() != TABLE_SIZE:
        raise ValueError("exponent table must be 16 uint8 values")
    if x.dim() != 2 or x.shape[1] != in_f:
        raise ValueError(f"x must be [m, {in_f}], got {tuple(x.shape)}")
    if block_r < 16 or block_k < 16 or block_r & (block_r - 1) or block_k & (block_k - 1):
        raise ValueError(f"block_r {block_r} and block_k {block_k} must be powers of two >= 16")
    if not HAVE_TRITON or not launchable(_p12_gemv_kernel, x.device) or in_f % 2:
        return p12_gemv_reference(x, payload, exponents, escape_index, escape_values, shape)
    if x.dtype == torch.float32:  # float32 x tiles (and TF32 splits) take 4x the registers
        block_k = min(block_k, BLOCK_K_FP32)
    x = x.contiguous()
    table = exponents.to(x.device).contiguous()
    if table.data_ptr() % 16:  # read as four 32-bit words
        table = table.clone()
    m = int(x.shape[0])
    y = torch.empty(m, out_f, dtype=torch.float32, device=x.device)
    grid = (triton.cdiv(out_f, block_r), triton.cdiv(m, BLOCK_M))
    _p12_gemv_kernel[grid](
        x,
        payload.contiguous(),
        table,
        y,
        m,
        out_f,
        in_f,
        2 * num_pairs(out_f * in_f),
        x.stride(0),
        y.stride(0),
        IEEE=x.dtype == torch.float32,
        EVEN_K=in_f % block_k == 0,
        BLOCK_M=BLOCK_M,
        BLOCK_R=block_r,
        BLOCK_K=block_k,
        num_warps=NUM_WARPS,
    )
    if escape_index.numel():
        rows, delta = _escape_correction(x, payload, exponents, escape_index, escape_values, in_f)
        y.index_add_(1, rows, delta)
    return y.to(x.dtype)
