"""NVFP4-style 4-bit codec for the FP4 hot-expert pool (layout: ``kernels.nvfp4_layout``).

``w ≈ e2m1 * scale_e4m3[block of 16] * global_scale`` with e2m1 magnitudes
``{0, 0.5, 1, 1.5, 2, 3, 4, 6}``, one float8 e4m3 scale per 16 consecutive weights along the
input dimension and one float32 global scale per tensor, as NVIDIA's NVFP4 does.

Nibble layout: bit 3 is the sign, bits 0-2 index the magnitudes above (the standard e2m1 bit
pattern). Two nibbles per byte, the even column in the low nibble.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from engine.codecs.format import (
    FP4_GLOBAL_SCALE_SUFFIX,
    FP4_PACKED_SUFFIX,
    FP4_SCALE_SUFFIX,
    FP4_SHAPE_SUFFIX,
)
from kernels.nvfp4_layout import (
    BLOCK,
    E2M1_MAX,
    E2M1_VALUES,
    E4M3_MAX,
    decode_nibbles_reference,
    nvfp4_dequant_reference,
)

__all__ = ["BLOCK", "E2M1_VALUES", "FP4Tensor", "decode_nibbles", "matrix_fp4_bytes", "quantize"]

# Decision boundaries between neighbouring magnitudes (midpoints).
_BOUNDS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)


def matrix_fp4_bytes(out_features: int, in_features: int) -> int:
    """Bytes of one ``[out, in]`` matrix in NVFP4: nibbles, e4m3 block scales, global scale."""
    n = out_features * in_features
    return n // 2 + n // BLOCK + 4


def _encode_nibbles(x: torch.Tensor) -> torch.Tensor:
    """Nearest e2m1 nibble (uint8) for values already divided by their block scale."""
    mag = x.abs()
    code = torch.zeros(x.shape, dtype=torch.uint8, device=x.device)
    for i, bound in enumerate(_BOUNDS):
        # Ties at the midpoint go to the even code (round half to even, like the hardware).
        code += (mag > bound) if i % 2 == 0 else (mag >= bound)
    sign = ((x < 0) & (code > 0)).to(torch.uint8) << 3
    return code | sign


def decode_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """e2m1 nibbles (uint8 0..15) to float32 values."""
    return decode_nibbles_reference(codes)


@dataclass(frozen=True)
class FP4Tensor:
    """An NVFP4-quantized ``[out, in]`` matrix."""

    packed: torch.Tensor  # uint8 [out, in/2]
    scales: torch.Tensor  # float8_e4m3fn [out, in/16]
    global_scale: torch.Tensor  # float32 [1]
    shape: tuple[int, int]

    def __post_init__(self) -> None:
        out_f, in_f = self.shape
        if in_f % BLOCK:
            raise ValueError(f"input dimension {in_f} is not a multiple of {BLOCK}")
        if self.packed.dtype != torch.uint8 or tuple(self.packed.shape) != (out_f, in_f // 2):
            raise ValueError(f"FP4 codes must be uint8 {(out_f, in_f // 2)}")
        if self.scales.dtype != torch.float8_e4m3fn or tuple(self.scales.shape) != (
            out_f,
            in_f // BLOCK,
        ):
            raise ValueError(f"FP4 scales must be float8_e4m3fn {(out_f, in_f // BLOCK)}")
        if self.global_scale.dtype != torch.float32 or self.global_scale.numel() != 1:
            raise ValueError("FP4 global scale must be one float32")

    @property
    def nbytes(self) -> int:
        return int(self.packed.numel() + self.scales.numel() + 4)

    def codes(self) -> torch.Tensor:
        """Unpacked nibbles ``[out, in]``."""
        lo = self.packed & 0xF
        hi = self.packed >> 4
        return torch.stack((lo, hi), dim=-1).reshape(self.shape)

    def dequantize(self, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        """``e2m1 * block scale * global scale``; on a GPU through the Triton kernel."""
        if self.packed.is_cuda:
            from kernels.nvfp4_dequant import nvfp4_dequant  # imports Triton: only when needed

            return nvfp4_dequant(self.packed, self.scales, self.global_scale, self.shape[1], dtype)
        return nvfp4_dequant_reference(
            self.packed, self.scales, self.global_scale, self.shape[1], dtype
        )

    def to_state_dict(self, prefix: str) -> dict[str, torch.Tensor]:
        """Tensors named ``prefix + suffix``; ``prefix`` is the original tensor name."""
        return {
            prefix + FP4_PACKED_SUFFIX: self.packed.contiguous(),
            prefix + FP4_SCALE_SUFFIX: self.scales.contiguous(),
            prefix + FP4_GLOBAL_SCALE_SUFFIX: self.global_scale.reshape(1).contiguous(),
            prefix + FP4_SHAPE_SUFFIX: torch.tensor(self.shape, dtype=torch.int64),
        }

    @classmethod
    def from_state_dict(cls, sd: Mapping[str, torch.Tensor], prefix: str) -> FP4Tensor:
        suffixes = (FP4_PACKED_SUFFIX, FP4_SCALE_SUFFIX, FP4_GLOBAL_SCALE_SUFFIX, FP4_SHAPE_SUFFIX)
        names = [prefix + s for s in suffixes]
        missing = [n for n in names if n not in sd]
        if missing:
            raise KeyError(f"FP4 tensor {prefix!r} is missing {', '.join(missing)}")
        shape_t = sd[names[3]]
        if shape_t.numel() != 2:
            raise ValueError(f"{names[3]} must hold 2 dimensions, got {shape_t.tolist()}")
        out_f, in_f = (int(v) for v in shape_t.tolist())
        return cls(sd[names[0]], sd[names[1]], sd[names[2]].reshape(1), (out_f, in_f))


def quantize(w: torch.Tensor) -> FP4Tensor:
    """Quantize ``w [out, in]`` to NVFP4 (round to nearest, max-abs block scales)."""
    if w.dim() != 2 or w.shape[1] % BLOCK:
        raise ValueError(
            f"NVFP4 quantizes 2-D weights with in % {BLOCK} == 0, got {tuple(w.shape)}"
        )
    out_f, in_f = int(w.shape[0]), int(w.shape[1])
    g = w.to(torch.float32).reshape(out_f, in_f // BLOCK, BLOCK)
    if not bool(torch.isfinite(g).all()):
        raise ValueError("NVFP4 cannot quantize non-finite weights")
    block_amax = g.abs().amax(dim=-1)
    tensor_amax = float(block_amax.max()) if block_amax.numel() else 0.0
    # The global scale maps the largest block scale onto e4m3's largest value.
    global_scale = tensor_amax / (E2M1_MAX * E4M3_MAX) if tensor_amax > 0 else 1.0
    scales = (block_amax / (E2M1_MAX * global_scale)).to(torch.float8_e4m3fn)
    eff = scales.to(torch.float32) * global_scale
    safe = torch.where(eff > 0, eff, torch.ones_like(eff)).unsqueeze(-1)
    x = torch.where(eff.unsqueeze(-1) > 0, g / safe, torch.zeros_like(g))
    nib = _encode_nibbles(x.clamp(-E2M1_MAX, E2M1_MAX)).reshape(out_f, in_f)
    packed = nib[:, 0::2] | (nib[:, 1::2] << 4)
    return FP4Tensor(
        packed.contiguous(),
        scales,
        torch.tensor([global_scale], dtype=torch.float32),
        (out_f, in_f),
    )
