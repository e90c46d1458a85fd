"""Bit layout of the NVFP4 hot-pool copies, defined once for kernels and engine.

``W[r, k] = e2m1(nibble[r, k]) * scale[r, k // 16] * global_scale``:

* nibble: bit 3 is the sign, bits 0-2 index ``E2M1_VALUES``; two per byte, the even column
  in the low nibble (``packed[r, j] = nib[r, 2j] | nib[r, 2j+1] << 4``);
* ``scale``: float8 e4m3 (``torch.float8_e4m3fn``), one per ``BLOCK`` = 16 inputs;
* ``global_scale``: one float32 per matrix.
"""

from __future__ import annotations

import torch

BLOCK = 16
E2M1_VALUES: tuple[float, ...] = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
E2M1_MAX = 6.0
E4M3_MAX = 448.0


def decode_nibbles_reference(codes: torch.Tensor) -> torch.Tensor:
    """e2m1 nibbles (uint8 0..15) to float32 values."""
    mags = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=codes.device)
    value = mags[(codes & 7).long()]
    return torch.where((codes & 8) > 0, -value, value)


def nvfp4_dequant_reference(
    packed: torch.Tensor,
    scales: torch.Tensor,
    global_scale: torch.Tensor,
    in_features: int,
    dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """Reference dequantisation of ``[out, in/2]`` packed nibbles (products in float32)."""
    out_f = int(packed.shape[0])
    if packed.dtype != torch.uint8 or tuple(packed.shape) != (out_f, in_features // 2):
        raise ValueError(f"packed nibbles must be uint8 {(out_f, in_features // 2)}")
    if scales.dtype != torch.float8_e4m3fn or tuple(scales.shape) != (out_f, in_features // BLOCK):
        raise ValueError(f"scales must be float8_e4m3fn {(out_f, in_features // BLOCK)}")
    codes = torch.stack((packed & 0xF, packed >> 4), dim=-1).reshape(out_f, in_features)
    values = decode_nibbles_reference(codes).view(out_f, in_features // BLOCK, BLOCK)
    scale = scales.to(torch.float32) * global_scale.to(torch.float32).reshape(())
    return (values * scale.unsqueeze(-1)).reshape(out_f, in_features).to(dtype)
