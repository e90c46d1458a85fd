"""Bit layout of the W2 (2-bit routed-expert) format, defined once for kernels and engine.

The layout (format version 1, see ``docs/quant-format.md``):

* Codes: each weight is one of ``CODEBOOK = (-4, -1, 1, 4)`` times its group scale.
  Code ``c`` in 0..3 indexes ``CODEBOOK``; so the code is monotone in the value.
* Groups: one scale per ``GROUP = 32`` consecutive weights along the input dimension.
* Packing: four codes per byte, the lowest column in the lowest bits:
  ``byte[r, j] = c[r, 4j] | c[r, 4j+1] << 2 | c[r, 4j+2] << 4 | c[r, 4j+3] << 6``.
* Scales: ``ue5m3``, an unsigned 8-bit float (5-bit exponent, 3-bit mantissa, no sign,
  exponent bias ``SCALE_EXP_BIAS``); byte 0 is exactly zero, every other byte ``b`` is
  ``2**((b >> 3) - SCALE_EXP_BIAS) * (1 + (b & 7) / 8)``. Its fp32 bit pattern is
  ``(b + SCALE_FP32_OFFSET) << 20``, so decoding is one add and one shift.

This module holds the PyTorch reference decoders; the Triton kernels in
``kernels.w2_dequant`` must agree with them.
"""

from __future__ import annotations

import torch

CODEBOOK: tuple[float, float, float, float] = (-4.0, -1.0, 1.0, 4.0)
GROUP = 32
CODES_PER_BYTE = 4
SCALE_EXP_BIAS = 20
#: ``(127 - SCALE_EXP_BIAS) << 3``: shifts a ue5m3 byte onto the fp32 exponent/mantissa field.
SCALE_FP32_OFFSET = (127 - SCALE_EXP_BIAS) << 3
#: Largest and smallest non-zero ue5m3 values.
SCALE_MAX = 2.0 ** (31 - SCALE_EXP_BIAS) * 1.875
SCALE_MIN = 2.0 ** (0 - SCALE_EXP_BIAS) * 1.125


def decode_scales_reference(enc: torch.Tensor) -> torch.Tensor:
    """Decode ue5m3 scale bytes (uint8) into float32."""
    if enc.dtype != torch.uint8:
        raise TypeError(f"ue5m3 scales must be uint8, got {enc.dtype}")
    b = enc.to(torch.int32)
    bits = (b + SCALE_FP32_OFFSET) << 20
    out = bits.view(torch.float32)
    return torch.where(b == 0, torch.zeros_like(out), out)


def unpack_codes_reference(packed: torch.Tensor, in_features: int) -> torch.Tensor:
    """Unpack ``[out, in/4]`` bytes into ``[out, in]`` codes (uint8, 0..3)."""
    if packed.dtype != torch.uint8 or packed.dim() != 2:
        raise TypeError("packed codes must be a 2-D uint8 tensor")
    if packed.shape[1] * CODES_PER_BYTE != in_features:
        raise ValueError(
            f"packed width {packed.shape[1]} does not hold {in_features} codes "
            f"({CODES_PER_BYTE} per byte)"
        )
    shifts = torch.tensor([0, 2, 4, 6], dtype=torch.uint8, device=packed.device)
    codes = (packed.unsqueeze(-1) >> shifts) & 3
    return codes.reshape(packed.shape[0], in_features)


def w2_dequant_reference(
    packed: torch.Tensor,
    scales_enc: torch.Tensor,
    in_features: int,
    dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """Reference dequantisation: ``W[r, k] = CODEBOOK[code[r, k]] * scale[r, k // 32]``.

    The product is formed in float32 and rounded once to ``dtype``.
    """
    codes = unpack_codes_reference(packed, in_features)
    scales = decode_scales_reference(scales_enc)
    if scales.shape != (packed.shape[0], in_features // GROUP):
        raise ValueError(
            f"scales shape {tuple(scales.shape)} does not match "
            f"{(packed.shape[0], in_features // GROUP)}"
        )
    book = torch.tensor(CODEBOOK, dtype=torch.float32, device=packed.device)
    values = book[codes.long()].view(packed.shape[0], in_features // GROUP, GROUP)
    return (values * scales.unsqueeze(-1)).reshape(packed.shape[0], in_features).to(dtype)


def w2_gemv_reference(
    x: torch.Tensor, packed: torch.Tensor, scales_enc: torch.Tensor, in_features: int
) -> torch.Tensor:
    """Reference ``y = x @ W.T`` for ``x [m, in]`` with W given in packed W2 form (fp32 math)."""
    w = w2_dequant_reference(packed, scales_enc, in_features, torch.float32)
    return (x.to(torch.float32) @ w.T).to(x.dtype)
