"""W2: the 2-bit routed-expert codec.

Each weight is ``CODEBOOK[code] * scale`` with the sign-symmetric codebook ``{-4, -1, 1, 4}``
and one scale per 32 consecutive weights along the input dimension. Codes are packed four per
byte and scales are stored as ue5m3 bytes (see ``kernels.w2_layout`` and
``docs/quant-format.md`` for the layout and the measured choice of scale dtype).

Always derive the codes from the *stored* scales: ``quantize_with_scales(w, round_scales(s))``
(``quantize_rtn`` does that), so the codes are optimal for what the decoder will see.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from engine.codecs.format import W2_PACKED_SUFFIX, W2_SCALE_SUFFIX, W2_SHAPE_SUFFIX
from kernels.w2_layout import (
    CODEBOOK,
    GROUP,
    SCALE_EXP_BIAS,
    SCALE_FP32_OFFSET,
    decode_scales_reference,
    unpack_codes_reference,
    w2_dequant_reference,
)

__all__ = [
    "CODEBOOK",
    "GROUP",
    "SCALE_EXP_BIAS",
    "W2Tensor",
    "code_values",
    "decode_scales",
    "dequantize",
    "encode_scales",
    "nearest_code",
    "pack_codes",
    "quantize_rtn",
    "quantize_with_scales",
    "round_scales",
    "rtn_scales",
    "unpack_codes",
]

# Thresholds between neighbouring levels of CODEBOOK (midpoints): -2.5, 0, 2.5.
_THRESH_OUTER = (CODEBOOK[2] + CODEBOOK[3]) / 2


def _check_matrix(w: torch.Tensor) -> tuple[int, int]:
    if w.dim() != 2:
        raise ValueError(f"W2 quantizes 2-D weights [out, in], got shape {tuple(w.shape)}")
    out_f, in_f = int(w.shape[0]), int(w.shape[1])
    if in_f % GROUP:
        raise ValueError(f"input dimension {in_f} is not a multiple of the group size {GROUP}")
    return out_f, in_f


def nearest_code(x: torch.Tensor) -> torch.Tensor:
    """Nearest codebook index (uint8 0..3) for values already divided by their scale.

    Exact zeros (and NaN-free ties at 0) go to +1 at even positions of the last dimension and to
    -1 at odd ones, so dead weights do not bias the layer's output in one direction.
    """
    code = (x > -_THRESH_OUTER).to(torch.uint8)
    code += x > 0
    code += x > _THRESH_OUTER
    zero = x == 0
    if bool(zero.any()):
        even = torch.arange(x.shape[-1], device=x.device) % 2 == 0
        code = torch.where(zero & even, torch.full_like(code, 2), code)
    return code


def code_values(codes: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Map codes 0..3 to codebook levels."""
    book = torch.tensor(CODEBOOK, dtype=dtype, device=codes.device)
    return book[codes.long()]


def _grouped(w: torch.Tensor) -> torch.Tensor:
    out_f, in_f = _check_matrix(w)
    return w.to(torch.float32).reshape(out_f, in_f // GROUP, GROUP)


def rtn_scales(w: torch.Tensor) -> torch.Tensor:
    """Per-group scales ``[out, in/32]`` (float32) minimising each group's squared error.

    With the codebook {-4, -1, 1, 4} the nearest code keeps the weight's sign, so a code
    assignment is fixed by how many of the group's largest magnitudes go to level 4 (``k``).
    For a given ``k`` the least-squares scale is ``s_k = (4 A_k + B_k) / (16 k + 32 - k)``
    (``A_k``: sum of the top ``k`` magnitudes, ``B_k``: the rest) and the error is
    ``|w|^2 - (4 A_k + B_k)^2 / (15 k + 32)``. The scale at the optimum is ``s_k`` for its own
    assignment, so taking the best of the 33 values of ``k`` is exact. Vectorised over groups.
    """
    g = _grouped(w).abs()
    mags = torch.sort(g, dim=-1, descending=True).values
    zero = torch.zeros_like(mags[..., :1])
    top = torch.cat((zero, torch.cumsum(mags, dim=-1)), dim=-1)  # A_k, k = 0..32
    total = top[..., -1:]
    k = torch.arange(GROUP + 1, dtype=torch.float32, device=g.device)
    cross = CODEBOOK[3] * top + (total - top)  # 4 A_k + B_k
    norm = (CODEBOOK[3] ** 2 - 1) * k + GROUP  # 16 k + (32 - k)
    best = torch.argmax(cross * cross / norm, dim=-1, keepdim=True)
    scale = (cross.gather(-1, best) / norm[best]).squeeze(-1)
    return scale


def quantize_with_scales(w: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """Codes ``[out, in]`` (uint8 0..3): nearest level of ``w / scale`` per group.

    A zero scale (an all-zero group) maps every weight to 0 after division, so the codes are
    sign-balanced and dequantize to 0.
    """
    g = _grouped(w)
    if scales.shape != g.shape[:2]:
        raise ValueError(f"scales shape {tuple(scales.shape)} does not match {tuple(g.shape[:2])}")
    s = scales.to(torch.float32).unsqueeze(-1)
    x = torch.where(s > 0, g / torch.where(s > 0, s, torch.ones_like(s)), torch.zeros_like(g))
    return nearest_code(x.reshape(w.shape))


def dequantize(
    codes: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype = torch.bfloat16
) -> torch.Tensor:
    """``W = CODEBOOK[codes] * scale`` from unpacked codes and float scales."""
    out_f, in_f = _check_matrix(codes)
    values = code_values(codes).reshape(out_f, in_f // GROUP, GROUP)
    return (values * scales.to(torch.float32).unsqueeze(-1)).reshape(out_f, in_f).to(dtype)


def pack_codes(codes: torch.Tensor) -> torch.Tensor:
    """Pack codes ``[out, in]`` four per byte, lowest column in the lowest bits."""
    out_f, in_f = _check_matrix(codes)
    c = codes.to(torch.uint8).reshape(out_f, in_f // 4, 4)
    return c[..., 0] | (c[..., 1] << 2) | (c[..., 2] << 4) | (c[..., 3] << 6)


def unpack_codes(packed: torch.Tensor, in_features: int) -> torch.Tensor:
    """Inverse of :func:`pack_codes`."""
    return unpack_codes_reference(packed, in_features)


def encode_scales(scales: torch.Tensor) -> torch.Tensor:
    """Encode float scales as ue5m3 bytes (round to nearest even, saturating).

    Scales must be finite and non-negative. Values below half the smallest step round to 0;
    values above ``SCALE_MAX`` saturate.
    """
    s = scales.to(torch.float32)
    if not bool(torch.isfinite(s).all()) or bool((s < 0).any()):
        raise ValueError("W2 scales must be finite and non-negative")
    bits = s.contiguous().view(torch.int32)
    # Round the 23-bit mantissa to 3 bits (round half to even) on the integer pattern.
    lsb = (bits >> 20) & 1
    rounded = (bits + 0x7FFFF + lsb) >> 20
    code = rounded - SCALE_FP32_OFFSET
    # Below the smallest normal ue5m3 value: round to 0 or to the smallest code (1).
    smallest = torch.tensor(2.0 ** (-SCALE_EXP_BIAS) * 1.125, dtype=torch.float32)
    tiny = code < 1
    code = torch.where(tiny, (s >= smallest / 2).to(torch.int32), code)
    return torch.clamp(code, 0, 255).to(torch.uint8)


def decode_scales(enc: torch.Tensor) -> torch.Tensor:
    """Decode ue5m3 bytes into float32 scales."""
    return decode_scales_reference(enc)


def round_scales(scales: torch.Tensor) -> torch.Tensor:
    """The scales as the decoder will see them: ``decode_scales(encode_scales(scales))``."""
    return decode_scales(encode_scales(scales))


@dataclass(frozen=True)
class W2Tensor:
    """A W2-quantized ``[out, in]`` matrix: packed codes and ue5m3 scales."""

    packed: torch.Tensor  # uint8 [out, in/4]
    scales_enc: torch.Tensor  # uint8 [out, in/32], ue5m3
    shape: tuple[int, int]

    def __post_init__(self) -> None:
        out_f, in_f = self.shape
        if in_f % GROUP:
            raise ValueError(f"input dimension {in_f} is not a multiple of {GROUP}")
        if self.packed.dtype != torch.uint8 or tuple(self.packed.shape) != (out_f, in_f // 4):
            raise ValueError(
                f"packed codes must be uint8 {(out_f, in_f // 4)}, "
                f"got {self.packed.dtype} {tuple(self.packed.shape)}"
            )
        if self.scales_enc.dtype != torch.uint8 or tuple(self.scales_enc.shape) != (
            out_f,
            in_f // GROUP,
        ):
            raise ValueError(
                f"scales must be uint8 {(out_f, in_f // GROUP)}, "
                f"got {self.scales_enc.dtype} {tuple(self.scales_enc.shape)}"
            )

    @classmethod
    def from_codes(cls, codes: torch.Tensor, scales_enc: torch.Tensor) -> W2Tensor:
        """Build from unpacked codes ``[out, in]`` and encoded scales."""
        out_f, in_f = _check_matrix(codes)
        return cls(pack_codes(codes), scales_enc, (out_f, in_f))

    @property
    def nbytes(self) -> int:
        return int(self.packed.numel() + self.scales_enc.numel())

    def codes(self) -> torch.Tensor:
        return unpack_codes(self.packed, self.shape[1])

    def scales(self) -> torch.Tensor:
        return decode_scales(self.scales_enc)

    def dequantize(self, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        """The matrix as ``CODEBOOK[code] * scale``; on a GPU through the Triton kernel."""
        if self.packed.is_cuda:
            from kernels.w2_dequant import w2_dequant  # imports Triton: only when needed

            return w2_dequant(self.packed, self.scales_enc, self.shape[1], dtype)
        return w2_dequant_reference(self.packed, self.scales_enc, self.shape[1], dtype)

    def to_state_dict(self, prefix: str) -> dict[str, torch.Tensor]:
        """Tensors named ``prefix + suffix``; ``prefix`` is the original tensor name."""
        return {
            prefix + W2_PACKED_SUFFIX: self.packed.contiguous(),
            prefix + W2_SCALE_SUFFIX: self.scales_enc.contiguous(),
            prefix + W2_SHAPE_SUFFIX: torch.tensor(self.shape, dtype=torch.int64),
        }

    @classmethod
    def from_state_dict(cls, sd: Mapping[str, torch.Tensor], prefix: str) -> W2Tensor:
        names = [prefix + s for s in (W2_PACKED_SUFFIX, W2_SCALE_SUFFIX, W2_SHAPE_SUFFIX)]
        missing = [n for n in names if n not in sd]
        if missing:
            raise KeyError(f"W2 tensor {prefix!r} is missing {', '.join(missing)}")
        shape_t = sd[names[2]]
        if shape_t.numel() != 2:
            raise ValueError(f"{names[2]} must hold 2 dimensions, got {shape_t.tolist()}")
        out_f, in_f = (int(v) for v in shape_t.tolist())
        return cls(sd[names[0]], sd[names[1]], (out_f, in_f))


def quantize_rtn(w: torch.Tensor) -> W2Tensor:
    """Round-to-nearest W2 quantization with least-squares group scales."""
    scales_enc = encode_scales(rtn_scales(w))
    codes = quantize_with_scales(w, decode_scales(scales_enc))
    return W2Tensor.from_codes(codes, scales_enc)
