"""Bit layout of the lossless 12-bit BF16 packing ("P12"), defined once for kernels and engine.

A BF16 value is ``s eeeeeeee mmmmmmm`` (sign, 8-bit exponent, 7-bit mantissa). P12 keeps the
sign and mantissa and replaces the exponent by a 4-bit index into a per-tensor table of 16
exponents. Layout (format version 1, see ``docs/quant-format.md``), for flat element ``i``:

* Elements are taken in pairs ``(2g, 2g+1)``; pair ``g`` occupies payload bytes ``3g..3g+2``:

  - ``payload[3g]   = sign(2g)   << 7 | mantissa(2g)``
  - ``payload[3g+1] = sign(2g+1) << 7 | mantissa(2g+1)``
  - ``payload[3g+2] = index(2g) | index(2g+1) << 4``

  An odd element count is padded with one zero code.
* ``exponents`` (uint8[16]): the table; the value is ``sign | exponents[index] << 7 | mantissa``.
* Escapes: a value whose exponent is not in the table is stored in the payload with index 0
  and its raw 16 bits are listed in ``escape_values`` (uint16) at flat position
  ``escape_index`` (int64, ascending); the decoder writes them over the decoded values.

This module holds the PyTorch reference decoder; ``kernels.bf16_unpack`` must agree with it.
"""

from __future__ import annotations

import torch

TABLE_SIZE = 16
BYTES_PER_PAIR = 3


def payload_nbytes(numel: int) -> int:
    """Payload size in bytes for ``numel`` values (12 bits each, padded to a whole pair)."""
    return BYTES_PER_PAIR * ((numel + 1) // 2)


def bf16_unpack_reference(
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
    triples = payload.view(-1, BYTES_PER_PAIR).to(torch.int32)
    sign_mant = triples[:, :2]
    nibbles = torch.stack((triples[:, 2] & 0xF, triples[:, 2] >> 4), dim=1)
    exps = exponents.to(torch.int32)[nibbles.long()]
    bits = ((sign_mant & 0x80) << 8) | (exps << 7) | (sign_mant & 0x7F)
    flat = bits.reshape(-1)[:numel].to(torch.int16)  # wraps the sign bit into int16
    if escape_index.numel():
        flat[escape_index.long()] = escape_values.view(torch.int16)
    return flat.view(torch.bfloat16)
