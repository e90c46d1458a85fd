# mypy: disable-error-code="no-untyped-def,untyped-decorator"
# (Triton kernel signatures are read by Triton; Python annotations there would change them.)
"""Triton kernel dequantizing NVFP4 hot-pool weights (e2m1 + e4m3 per 16 + fp32) into bf16.

The e4m3 scales are passed as raw bytes and decoded with integer operations (normal:
``(e + 120) << 23 | m << 20`` as fp32 bits; subnormal: ``m * 2^-9``), so the kernel needs no
fp8 support from the backend. Layout and reference: ``kernels.nvfp4_layout``.
"""

from __future__ import annotations

import torch

from kernels._triton import HAVE_TRITON, launchable, tl, triton, word_bytes, word_rows
from kernels.nvfp4_layout import BLOCK, nvfp4_dequant_reference

__all__ = ["nvfp4_dequant", "nvfp4_dequant_reference"]

if HAVE_TRITON:

    @triton.jit
    def _nvfp4_dequant_kernel(
        packed_ptr,
        scale_ptr,
        global_ptr,
        out_ptr,
        n_rows,
        in_features,
        code_words,
        scale_words,
        BLOCK_R: tl.constexpr,
        BLOCK_K: tl.constexpr,
    ):
        # Nibbles and scales are loaded as 32-bit words (whole words per lane, adjacent lanes
        # on adjacent words; was one LDG.E.U8 per value) and split in registers.
        rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
        k0 = tl.program_id(1) * BLOCK_K
        cols = k0 + tl.arange(0, BLOCK_K)
        row_ok = rows < n_rows
        mask = row_ok[:, None] & (cols[None, :] < in_features)
        w = k0 // 8 + tl.arange(0, BLOCK_K // 8)
        word = tl.load(
            packed_ptr.to(tl.pointer_type(tl.int32)) + rows[:, None] * code_words + w[None, :],
            mask=row_ok[:, None] & (w < code_words)[None, :],
            other=0,
        )
        byte = word_bytes(word)
        nib = tl.reshape(
            (byte[:, :, None] >> (tl.arange(0, 2) * 4)[None, None, :]) & 0xF, [BLOCK_R, BLOCK_K]
        )
        mag_code = nib & 7
        # e2m1 magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6: codes >= 2 are 2^(e-1) * (1 + m/2).
        e = mag_code >> 1
        m = mag_code & 1
        normal = tl.exp2((e - 1).to(tl.float32)) * (1.0 + 0.5 * m.to(tl.float32))
        mag = tl.where(e == 0, 0.5 * m.to(tl.float32), normal)
        value = tl.where((nib & 8) != 0, -mag, mag)
        scale_row = scale_ptr.to(tl.pointer_type(tl.int32)) + rows[:, None] * scale_words
        if BLOCK_K >= 64:
            sw = k0 // 64 + tl.arange(0, BLOCK_K // 64)
            sword = tl.load(
                scale_row + sw[None, :], mask=row_ok[:, None] & (sw < scale_words)[None, :], other=0
            )
            sb = word_bytes(sword)
        else:  # fewer blocks than a word holds: lanes share the word
            g = k0 // 16 + tl.arange(0, BLOCK_K // 16)
            sword = tl.load(
                scale_row + (g // 4)[None, :],
                mask=row_ok[:, None] & (g // 4 < scale_words)[None, :],
                other=0,
            )
            sb = (sword >> ((g % 4) * 8)[None, :]) & 0xFF
        se = (sb >> 3) & 0xF
        sm = sb & 7
        s_normal = (((se + 120) << 23) | (sm << 20)).to(tl.float32, bitcast=True)
        s_sub = sm.to(tl.float32) * 0.001953125  # m * 2^-9
        scale = tl.where(se == 0, s_sub, s_normal)
        g = tl.load(global_ptr)
        deq = tl.reshape(
            tl.reshape(value, [BLOCK_R, BLOCK_K // 16, 16]) * (scale * g)[:, :, None],
            [BLOCK_R, BLOCK_K],
        )
        out = out_ptr + rows[:, None] * in_features + cols[None, :]
        tl.store(out, deq.to(out_ptr.dtype.element_ty), mask=mask)


def nvfp4_dequant(
    packed: torch.Tensor,
    scales: torch.Tensor,
    global_scale: torch.Tensor,
    in_features: int,
    dtype: torch.dtype = torch.bfloat16,
    block_r: int = 16,
    block_k: int = 256,
) -> torch.Tensor:
    """Dequantize with the Triton kernel; equal to ``nvfp4_dequant_reference``.

    Falls back to the reference where Triton cannot run (see ``kernels._triton``).
    """
    out_f = int(packed.shape[0])
    if packed.dtype != torch.uint8 or tuple(packed.shape) != (out_f, in_features // 2):
        raise ValueError(f"packed nibbles must be uint8 {(out_f, in_features // 2)}")
    if scales.dtype != torch.float8_e4m3fn or tuple(scales.shape) != (out_f, in_features // BLOCK):
        raise ValueError(f"scales must be float8_e4m3fn {(out_f, in_features // BLOCK)}")
    if not HAVE_TRITON or not launchable(_nvfp4_dequant_kernel, packed.device):
        return nvfp4_dequant_reference(packed, scales, global_scale, in_features, dtype)
    if block_k % BLOCK or block_k & (block_k - 1):
        raise ValueError(f"block_k must be a power-of-two multiple of {BLOCK}, got {block_k}")
    (packed, code_words), (scale_bytes, scale_words) = (
        word_rows(packed),
        word_rows(scales.contiguous().view(torch.uint8)),
    )
    out = torch.empty(out_f, in_features, dtype=dtype, device=packed.device)
    grid = (triton.cdiv(out_f, block_r), triton.cdiv(in_features, block_k))
    _nvfp4_dequant_kernel[grid](
        packed,
        scale_bytes,
        global_scale.to(device=packed.device, dtype=torch.float32).reshape(1),
        out,
        out_f,
        in_features,
        code_words,
        scale_words,
        BLOCK_R=block_r,
        BLOCK_K=block_k,
    )
    return out
