"""Lossless 12-bit packing of BF16 tensors ("P12").

Each value keeps its sign and 7-bit mantissa; its 8-bit exponent becomes a 4-bit index into a
per-tensor table of the 16 most frequent exponents. Values with any other exponent are escaped:
their raw 16 bits go to a sparse list. Bit layout: ``kernels.bf16_layout``. The round trip is
bit-exact for every pattern (NaN payloads, infinities, subnormals, -0.0).

The byte-level work is done on uint8 views with 256-entry lookup tables, so packing and
unpacking stream through memory a handful of times (see ``bench/bf16pack_throughput.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from engine.quant.format import (
    P12_ESCAPE_INDEX_SUFFIX,
    P12_ESCAPE_VALUE_SUFFIX,
    P12_EXPONENTS_SUFFIX,
    P12_PAYLOAD_SUFFIX,
    P12_SHAPE_SUFFIX,
)
from kernels.bf16_layout import BYTES_PER_PAIR, TABLE_SIZE, payload_nbytes

__all__ = ["PackedBF16", "exponent_table", "pack", "unpack"]


@dataclass(frozen=True)
class PackedBF16:
    """A BF16 tensor packed to 12 bits per value plus an escape list."""

    payload: torch.Tensor  # uint8 [3 * ceil(n/2)]
    exponents: torch.Tensor  # uint8 [16]
    escape_index: torch.Tensor  # int64 [k], ascending flat positions
    escape_values: torch.Tensor  # uint16 [k], raw bf16 bits
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        n = self.numel
        if self.payload.dtype != torch.uint8 or self.payload.numel() != payload_nbytes(n):
            raise ValueError(
                f"P12 payload must be {payload_nbytes(n)} uint8 bytes for shape {self.shape}, "
                f"got {self.payload.numel()} {self.payload.dtype}"
            )
        if self.exponents.dtype != torch.uint8 or self.exponents.numel() != TABLE_SIZE:
            raise ValueError("P12 exponent table must be 16 uint8 values")
        if self.escape_index.dtype != torch.int64 or self.escape_values.dtype != torch.uint16:
            raise ValueError("P12 escapes must be int64 positions and uint16 values")
        if self.escape_index.numel() != self.escape_values.numel():
            raise ValueError(
                f"P12 escape list has {self.escape_index.numel()} positions but "
                f"{self.escape_values.numel()} values"
            )
        k = self.escape_index.numel()
        if k and (int(self.escape_index.min()) < 0 or int(self.escape_index.max()) >= n):
            raise ValueError(f"P12 escape positions fall outside the {n} values")

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        """Stored bytes (payload, table and escapes)."""
        return int(self.payload.numel() + TABLE_SIZE + 10 * self.escape_index.numel())

    def to_state_dict(self, prefix: str) -> dict[str, torch.Tensor]:
        """Tensors named ``prefix + suffix``; ``prefix`` is the original tensor name."""
        return {
            prefix + P12_PAYLOAD_SUFFIX: self.payload.contiguous(),
            prefix + P12_EXPONENTS_SUFFIX: self.exponents.contiguous(),
            prefix + P12_ESCAPE_INDEX_SUFFIX: self.escape_index.contiguous(),
            prefix + P12_ESCAPE_VALUE_SUFFIX: self.escape_values.contiguous(),
            prefix + P12_SHAPE_SUFFIX: torch.tensor(self.shape, dtype=torch.int64),
        }

    @classmethod
    def from_state_dict(cls, sd: Mapping[str, torch.Tensor], prefix: str) -> PackedBF16:
        suffixes = (
            P12_PAYLOAD_SUFFIX,
            P12_EXPONENTS_SUFFIX,
            P12_ESCAPE_INDEX_SUFFIX,
            P12_ESCAPE_VALUE_SUFFIX,
            P12_SHAPE_SUFFIX,
        )
        names = [prefix + s for s in suffixes]
        missing = [n for n in names if n not in sd]
        if missing:
            raise KeyError(f"P12 tensor {prefix!r} is missing {', '.join(missing)}")
        payload, exps, esc_i, esc_v, shape_t = (sd[n] for n in names)
        return cls(payload, exps, esc_i, esc_v, tuple(int(d) for d in shape_t.tolist()))


def _bytes_of(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(low byte, high byte) uint8 views of a bf16 tensor's bit patterns (little endian)."""
    b = t.contiguous().reshape(-1).view(torch.uint8).view(-1, 2)
    return b[:, 0], b[:, 1]


def exponent_table(t: torch.Tensor) -> torch.Tensor:
    """The 16 most frequent exponents of ``t`` (uint8[16]), most frequent first.

    Ties, and the filler slots of a tensor with fewer than 16 distinct exponents, are broken by
    the smaller exponent, so the table is deterministic.
    """
    lo, hi = _bytes_of(t)
    exp = ((hi & 0x7F) << 1) | (lo >> 7)
    counts = torch.bincount(exp.to(torch.int32), minlength=256)
    key = counts.to(torch.int64) * 256 + (255 - torch.arange(256, dtype=torch.int64))
    return torch.topk(key, TABLE_SIZE).indices.to(torch.uint8)


def pack(t: torch.Tensor, exponents: torch.Tensor | None = None) -> PackedBF16:
    """Pack a bfloat16 tensor to 12 bits per value (plus escapes)."""
    if t.dtype != torch.bfloat16:
        raise TypeError(f"P12 packs bfloat16 tensors, got {t.dtype}")
    table = exponent_table(t) if exponents is None else exponents.to(torch.uint8)
    if table.numel() != TABLE_SIZE:
        raise ValueError("P12 exponent table must hold 16 exponents")
    n = t.numel()
    lo, hi = _bytes_of(t)
    # 256-entry map from exponent to table index, -1 (0xFF) for escapes.
    index_of = torch.full((256,), 0xFF, dtype=torch.uint8)
    index_of[table.long().flip(0)] = torch.arange(TABLE_SIZE - 1, -1, -1, dtype=torch.uint8)
    exp = ((hi & 0x7F) << 1) | (lo >> 7)
    idx = index_of[exp.to(torch.int32)]
    escaped = idx == 0xFF
    sign_mant = (hi & 0x80) | (lo & 0x7F)
    idx = idx.masked_fill(escaped, 0)
    if n % 2:
        pad = torch.zeros(1, dtype=torch.uint8)
        sign_mant, idx = torch.cat((sign_mant, pad)), torch.cat((idx, pad))
    npairs = (n + 1) // 2
    payload = torch.empty(npairs, BYTES_PER_PAIR, dtype=torch.uint8)
    payload[:, :2] = sign_mant.view(npairs, 2)
    pairs = idx.view(npairs, 2)
    payload[:, 2] = pairs[:, 0] | (pairs[:, 1] << 4)
    escape_index = torch.nonzero(escaped).reshape(-1)
    raw = t.contiguous().reshape(-1).view(torch.int16)[escape_index]
    return PackedBF16(
        payload.reshape(-1), table, escape_index, raw.view(torch.uint16), tuple(t.shape)
    )


def unpack(p: PackedBF16) -> torch.Tensor:
    """Decode a :class:`PackedBF16` back into the exact original bfloat16 tensor."""
    n = p.numel
    npairs = (n + 1) // 2
    triples = p.payload.view(npairs, BYTES_PER_PAIR)
    table = p.exponents.to(torch.int32)
    # Per nibble byte, the high/low output byte contributions of both elements of the pair.
    nib = torch.arange(256, dtype=torch.int32)
    e_even, e_odd = table[nib & 0xF], table[nib >> 4]
    hi_even, lo_even = (e_even >> 1).to(torch.uint8), ((e_even & 1) << 7).to(torch.uint8)
    hi_odd, lo_odd = (e_odd >> 1).to(torch.uint8), ((e_odd & 1) << 7).to(torch.uint8)
    nibbles = triples[:, 2].to(torch.int32)
    out = torch.empty(npairs, 2, 2, dtype=torch.uint8)  # [pair, element, (lo, hi)]
    sm0, sm1 = triples[:, 0], triples[:, 1]
    torch.bitwise_or(sm0 & 0x7F, lo_even[nibbles], out=out[:, 0, 0])
    torch.bitwise_or(sm0 & 0x80, hi_even[nibbles], out=out[:, 0, 1])
    torch.bitwise_or(sm1 & 0x7F, lo_odd[nibbles], out=out[:, 1, 0])
    torch.bitwise_or(sm1 & 0x80, hi_odd[nibbles], out=out[:, 1, 1])
    flat = out.view(-1).view(torch.int16)[:n]
    if p.escape_index.numel():
        flat = flat.clone() if n % 2 else flat
        flat[p.escape_index] = p.escape_values.view(torch.int16)
    return flat.view(torch.bfloat16).reshape(p.shape)
