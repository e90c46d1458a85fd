"""Bit layout of the lossless 12-bit BF16 packing ("P12"), defined once for kernels and engine.

A BF16 value is ``s eeeeeeee mmmmmmm`` (sign, 8-bit exponent, 7-bit mantissa). P12 keeps the
sign and mantissa and replaces the exponent by a 4-bit index into a per-tensor table of 16
exponents. Layout (format version 1, see ``docs/quant-format.md``) for ``n`` values in flat
(row-major) order, ``P = ceil(n / 2)`` pairs, payload of ``3 * P`` bytes:

* Sign/mantissa plane, bytes ``[0, 2P)``: ``payload[i] = sign(i) << 7 | mantissa(i)``.
* Index plane, bytes ``[2P, 3P)``: ``payload[2P + g] = index(2g) | index(2g + 1) << 4``.
* An odd ``n`` is padded with one zero byte in each plane.
* ``exponents`` (uint8[16], ascending): value ``i`` is
  ``sign(i) << 15 | exponents[index(i)] << 7 | mantissa(i)``.
* Escapes: a value whose exponent is not in the table is stored with index 0 and its raw 16
  bits are listed in ``escape_values`` (uint16) at flat position ``escape_index`` (int64,
  ascending); the decoder writes them over the decoded values.

Both planes are byte streams in element order, so a kernel decoding a tile of a row reads two
contiguous ranges (aligned wide loads on CPUs and GPUs alike).

This module holds the PyTorch reference decoder; ``kernels.p12_unpack`` must agree with it.
"""

from __future__ import annotations

import torch

TABLE_SIZE = 16


def num_pairs(numel: int) -> int:
    return (numel + 1) // 2


def payload_nbytes(numel: int) -> int:
    """Payload size in bytes for ``numel`` values (12 bits each, padded to a whole pair)."""
    return 3 * num_pairs(numel)


def p12_unpack_reference(
    payload: torch.Tensor,
    exponents: torch.Tensor,
    escape_index: torch.Tensor,
    escape_values: torch.Tensor,
    numel: int,
) -> torch.Tensor:
    """Decode a P12 payload into a flat bfloat16 tensor of ``numel`` values, bit-exactly."""
    if payload.dtype != torch.uint8 or payload.numel() != payload_nbytes(numel):
        raise ValueError(
            f"payload must be {payload_nbytes(numel)} uint8 bytes for {numel} values, "
            f"got {payload.numel()} {payload.dtype}"
        )
    if exponents.dtype != torch.uint8 or exponents.numel() != TABLE_SIZE:
        raise ValueError("exponent table must be 16 uint8 values")
    pairs = num_pairs(numel)
    flat = payload.reshape(-1)
    sign_mant = flat[: 2 * pairs].to(torch.int32)
    packed_idx = flat[2 * pairs :].to(torch.int32)
    idx = torch.stack((packed_idx & 0xF, packed_idx >> 4), dim=1).reshape(-1)
    exps = exponents.to(torch.int32)[idx.long()]
    bits = ((sign_mant & 0x80) << 8) | (exps << 7) | (sign_mant & 0x7F)
    out = bits[:numel].to(torch.int16)  # narrowing keeps the low 16 bits (the sign wraps)
    if escape_index.numel():
        out[escape_index.long()] = escape_values.view(torch.int16)
    return out.view(torch.bfloat16)
