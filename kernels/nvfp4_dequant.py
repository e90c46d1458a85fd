# mypy: disable-error-code="no-untyped-def,untyped-decorator"
# (Triton kernel signatures are read by Triton; Python annotations there would change them.)
"""Triton kernel dequantizing NVFP4 hot-pool weights (e2m1 + e4m3 per 16 + fp32) into bf16.

The e4m3 scales are passed as raw bytes and decoded with integer operations (normal:
``(e + 120) << 23 | m << 20`` as fp32 bits; subnormal: ``m * 2^-9``), so the kernel needs no
fp8 support from the backend. Layout and reference: ``kernels.nvfp4_layout``.
"""

from __future__ import annotations

import torch

from kernels._triton import HAVE_TRITON, launchable, tl, triton
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
        BLOCK_R: tl.constexpr,
        BLOCK_K: tl.constexpr,
    ):
        rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
        cols = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
        mask = (rows[:, None] < n_rows) & (cols[None, :] < in_features)
        byte = tl.load(
            packed_ptr + rows[:, None] * (in_features // 2) + cols[None, :] // 2,
            mask=mask,
            other=0,
        ).to(tl.int32)
        nib = (byte >> ((cols[None, :] % 2) * 4)) & 0xF
        mag_code = nib & 7
        # e2m1 magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6: codes >= 2 are 2^(e-1) * (1 + m/2).
        e = mag_code >> 1
        m = mag_code & 1
        normal = tl.exp2((e - 1).to(tl.float32)) * (1.0 + 0.5 * m.to(tl.float32))
        mag = tl.where(e == 0, 0.5 * m.to(tl.float32), normal)
        value = tl.where((nib & 8) != 0, -mag, mag)
        sb = tl.load(
            scale_ptr + rows[:, None] * (in_features // 16) + cols[None, :] // 16,
            mask=mask,
            other=0,
        ).to(tl.int32)
        se = (sb >> 3) & 0xF
        sm = sb & 7
        s_normal = (((se + 120) << 23) | (sm << 20)).to(tl.float32, bitcast=True)
        s_sub = sm.to(tl.float32) * 0.001953125  # m * 2^-9
        scale = tl.where(se == 0, s_sub, s_normal)
        g = tl.load(global_ptr)
        out = out_ptr + rows[:, None] * in_features + cols[None, :]
        tl.store(out, (value * (scale * g)).to(out_ptr.dtype.element_ty), mask=mask)


def nvfp4_dequant(
    packed: torch.Tensor,
    scales: torch.Tensor,
    global_scale: torch.Tensor,
    in_features: int,
    dtype: torch.dtype = torch.bfloat16,
    block_r: int = 16,
    block_k: int = 64,
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
    out = torch.empty(out_f, in_features, dtype=dtype, device=packed.device)
    grid = (triton.cdiv(out_f, block_r), triton.cdiv(in_features, block_k))
    _nvfp4_dequant_kernel[grid](
        packed.contiguous(),
        scales.contiguous().view(torch.uint8),
        global_scale.to(device=packed.device, dtype=torch.float32).reshape(1),
        out,
        out_f,
        in_features,
        BLOCK_R=block_r,
        BLOCK_K=block_k,
    )
    return out
