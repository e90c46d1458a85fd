# mypy: disable-error-code="no-untyped-def,untyped-decorator"
# (Triton kernel signatures are read by Triton; Python annotations there would change them.)
"""Triton kernels for W2 (2-bit codes, ue5m3 scales per 32): dequantize and a decode GEMV.

``w2_dequant`` expands packed codes into a bf16 matrix; ``w2_gemv`` computes ``y = x @ W.T``
for a few rows of ``x`` (decode) straight from the packed codes, without materialising W.
Bit layout and PyTorch references: ``kernels.w2_layout``.
"""

from __future__ import annotations

import torch

from kernels._triton import HAVE_TRITON, launchable, tl, triton, word_bytes, word_rows
from kernels.w2_layout import (
    CODES_PER_BYTE,
    GROUP,
    SCALE_FP32_OFFSET,
    decode_scales_reference,
    unpack_codes_reference,
    w2_dequant_reference,
    w2_gemv_reference,
)

__all__ = [
    "decode_scales_reference",
    "unpack_codes_reference",
    "w2_dequant",
    "w2_dequant_reference",
    "w2_gemv",
    "w2_matmul",
    "w2_gemv_reference",
]

if HAVE_TRITON:

    @triton.jit
    def _w2_tile(
        packed_ptr,
        scales_ptr,
        rows,
        k0,
        n_rows,
        in_features,
        code_words,
        scale_words,
        SCALE_OFFSET,
        BLOCK_K: tl.constexpr,
    ):
        """W's ``[rows, k0 : k0 + BLOCK_K]`` as float32 values and ``[rows, BLOCK_K / 32]`` scales
        (inlined into both kernels). Codes and scales are loaded as 32-bit words, whole words
        per lane and adjacent lanes on adjacent words (a [16, 128] tile: 16 x 8 code words,
        16 x 1 scale words), then split into bytes in registers (``word_bytes``)."""
        row_ok = rows < n_rows
        w = k0 // 16 + tl.arange(0, BLOCK_K // 16)
        word = tl.load(
            packed_ptr.to(tl.pointer_type(tl.int32)) + rows[:, None] * code_words + w[None, :],
            mask=row_ok[:, None] & (w < code_words)[None, :],
            other=0,
        )
        shifts = tl.arange(0, 4) * 2
        code = tl.reshape(
            (word_bytes(word)[:, :, None] >> shifts[None, None, :]) & 3, [rows.shape[0], BLOCK_K]
        )
        mag = tl.where((code == 0) | (code == 3), 4.0, 1.0)
        value = tl.where(code >= 2, mag, -mag)
        scale_row = scales_ptr.to(tl.pointer_type(tl.int32)) + rows[:, None] * scale_words
        if BLOCK_K >= 128:
            sw = k0 // 128 + tl.arange(0, BLOCK_K // 128)
            sword = tl.load(
                scale_row + sw[None, :], mask=row_ok[:, None] & (sw < scale_words)[None, :], other=0
            )
            sbyte = word_bytes(sword)
        else:  # fewer groups than a word holds: lanes share the word
            g = k0 // 32 + tl.arange(0, BLOCK_K // 32)
            sword = tl.load(
                scale_row + (g // 4)[None, :],
                mask=row_ok[:, None] & (g // 4 < scale_words)[None, :],
                other=0,
            )
            sbyte = (sword >> ((g % 4) * 8)[None, :]) & 0xFF
        scale = ((sbyte + SCALE_OFFSET) << 20).to(tl.float32, bitcast=True)
        scale = tl.where(sbyte == 0, 0.0, scale)
        return value, scale

    @triton.jit
    def _w2_dequant_kernel(
        packed_ptr,
        scales_ptr,
        out_ptr,
        n_rows,
        in_features,
        code_words,
        scale_words,
        SCALE_OFFSET: tl.constexpr,
        BLOCK_R: tl.constexpr,
        BLOCK_K: tl.constexpr,
    ):
        rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
        k0 = tl.program_id(1) * BLOCK_K
        value, scale = _w2_tile(
            packed_ptr,
            scales_ptr,
            rows,
            k0,
            n_rows,
            in_features,
            code_words,
            scale_words,
            SCALE_OFFSET,
            BLOCK_K,
        )
        w = tl.reshape(
            tl.reshape(value, [BLOCK_R, BLOCK_K // 32, 32]) * scale[:, :, None], [BLOCK_R, BLOCK_K]
        )
        cols = k0 + tl.arange(0, BLOCK_K)
        out = out_ptr + rows[:, None] * in_features + cols[None, :]
        mask = (rows[:, None] < n_rows) & (cols[None, :] < in_features)
        tl.store(out, w.to(out_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def _w2_gemv_kernel(
        x_ptr,
        packed_ptr,
        scales_ptr,
        y_ptr,
        n_rows,
        in_features,
        code_words,
        scale_words,
        stride_xm,
        stride_ym,
        SCALE_OFFSET: tl.constexpr,
        BLOCK_R: tl.constexpr,
        BLOCK_K: tl.constexpr,
    ):
        # Each packed word is loaded once and split into its sixteen codes; the group scale is
        # applied once per 32 products (sum of code * x within the group, then times scale).
        GROUPS: tl.constexpr = BLOCK_K // 32
        rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
        m = tl.program_id(1)
        acc = tl.zeros([BLOCK_R], dtype=tl.float32)
        for k0 in range(0, in_features, BLOCK_K):
            value, scale = _w2_tile(
                packed_ptr,
                scales_ptr,
                rows,
                k0,
                n_rows,
                in_features,
                code_words,
                scale_words,
                SCALE_OFFSET,
                BLOCK_K,
            )
            cols = k0 + tl.arange(0, BLOCK_K)
            x = tl.load(x_ptr + m * stride_xm + cols, mask=cols < in_features, other=0.0)
            part = tl.sum(tl.reshape(value * x.to(tl.float32)[None, :], [BLOCK_R, GROUPS, 32]), 2)
            acc += tl.sum(part * scale, 1)
        tl.store(y_ptr + m * stride_ym + rows, acc.to(y_ptr.dtype.element_ty), mask=rows < n_rows)


def _check(packed: torch.Tensor, scales_enc: torch.Tensor, in_features: int) -> int:
    if packed.dtype != torch.uint8 or scales_enc.dtype != torch.uint8:
        raise TypeError("packed codes and ue5m3 scales must be uint8")
    n_rows = int(packed.shape[0])
    if in_features % GROUP or tuple(packed.shape) != (n_rows, in_features // CODES_PER_BYTE):
        raise ValueError(f"packed shape {tuple(packed.shape)} does not fit in={in_features}")
    if tuple(scales_enc.shape) != (n_rows, in_features // GROUP):
        raise ValueError(f"scales shape {tuple(scales_enc.shape)} does not fit in={in_features}")
    return n_rows


def _block_k(block_k: int) -> None:
    if block_k % GROUP or block_k & (block_k - 1):
        raise ValueError(
            f"block_k must be a power-of-two multiple of the group size {GROUP}, got {block_k}"
        )


def w2_dequant(
    packed: torch.Tensor,
    scales_enc: torch.Tensor,
    in_features: int,
    dtype: torch.dtype = torch.bfloat16,
    block_r: int = 16,
    block_k: int = 256,
) -> torch.Tensor:
    """Dequantize with the Triton kernel; bit-identical to ``w2_dequant_reference``.

    Falls back to the reference where Triton cannot run (see ``kernels._triton``).
    """
    n_rows = _check(packed, scales_enc, in_features)
    _block_k(block_k)
    if not HAVE_TRITON or not launchable(_w2_dequant_kernel, packed.device):
        return w2_dequant_reference(packed, scales_enc, in_features, dtype)
    (packed, code_words), (scales_enc, scale_words) = word_rows(packed), word_rows(scales_enc)
    out = torch.empty(n_rows, in_features, dtype=dtype, device=packed.device)
    grid = (triton.cdiv(n_rows, block_r), triton.cdiv(in_features, block_k))
    _w2_dequant_kernel[grid](
        packed,
        scales_enc,
        out,
        n_rows,
        in_features,
        code_words,
        scale_words,
        SCALE_OFFSET=SCALE_FP32_OFFSET,
        BLOCK_R=block_r,
        BLOCK_K=block_k,
    )
    return out


def w2_gemv(
    x: torch.Tensor,
    packed: torch.Tensor,
    scales_enc: torch.Tensor,
    in_features: int,
    block_r: int = 16,
    block_k: int = 256,
) -> torch.Tensor:
    """``y = x @ W.T`` for ``x [m, in]`` from packed W2 weights (fp32 accumulation)."""
    n_rows = _check(packed, scales_enc, in_features)
    _block_k(block_k)
    if x.dim() != 2 or x.shape[1] != in_features:
        raise ValueError(f"x must be [m, {in_features}], got {tuple(x.shape)}")
    if not HAVE_TRITON or not launchable(_w2_gemv_kernel, x.device):
        return w2_gemv_reference(x, packed, scales_enc, in_features)
    x = x.contiguous()
    (packed, code_words), (scales_enc, scale_words) = word_rows(packed), word_rows(scales_enc)
    y = torch.empty(x.shape[0], n_rows, dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(n_rows, block_r), x.shape[0])
    _w2_gemv_kernel[grid](
        x,
        packed,
        scales_enc,
        y,
        n_rows,
        in_features,
        code_words,
        scale_words,
        x.stride(0),
        y.stride(0),
        SCALE_OFFSET=SCALE_FP32_OFFSET,
        BLOCK_R=block_r,
        BLOCK_K=block_k,
    )
    return y


def w2_matmul(
    x: torch.Tensor,
    packed: torch.Tensor,
    scales_enc: torch.Tensor,
    in_features: int,
    gemv_max_rows: int = 8,
) -> torch.Tensor:
    """``y = x @ W.T`` for one W2 matrix, the cheaper way for ``x``'s row count.

    Up to ``gemv_max_rows`` rows (decode: a few tokens on one expert) the GEMV reads the packed
    codes directly (2.25 bits per weight); with more, dequantizing once and one GEMM costs less.
    Both fall back to the references where Triton cannot run.
    """
    if x.dim() == 2 and x.shape[0] <= gemv_max_rows:
        return w2_gemv(x, packed, scales_enc, in_features)
    return x @ w2_dequant(packed, scales_enc, in_features, x.dtype).t()
