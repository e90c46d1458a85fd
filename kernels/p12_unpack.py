# mypy: disable-error-code="no-untyped-def,untyped-decorator"
# (Triton kernel signatures are read by Triton; Python annotations there would change them.)
"""Triton kernel decoding the lossless 12-bit BF16 packing (P12) into bfloat16.

One program decodes ``BLOCK`` consecutive values: it reads their sign/mantissa bytes and index
nibbles from the two payload planes, looks the exponents up in the 16-entry table and writes
the 16-bit patterns; the (rare) escapes are then scattered over the result. Bit layout and the
PyTorch reference: ``kernels.p12_layout``.
"""

from __future__ import annotations

import torch

from kernels._triton import HAVE_TRITON, launchable, tl, triton
from kernels.p12_layout import TABLE_SIZE, num_pairs, p12_unpack_reference, payload_nbytes

__all__ = ["p12_unpack", "p12_unpack_reference"]

if HAVE_TRITON:

    @triton.jit
    def _p12_unpack_kernel(
        payload_ptr,
        table_ptr,
        out_ptr,
        numel,
        index_plane,
        BLOCK: tl.constexpr,
    ):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < numel
        sign_mant = tl.load(payload_ptr + offs, mask=mask, other=0).to(tl.int32)
        nib_byte = tl.load(payload_ptr + index_plane + offs // 2, mask=mask, other=0).to(tl.int32)
        idx = (nib_byte >> ((offs % 2) * 4)) & 0xF
        exp = tl.load(table_ptr + idx, mask=mask, other=0).to(tl.int32)
        bits = ((sign_mant & 0x80) << 8) | (exp << 7) | (sign_mant & 0x7F)
        # Keep the low 16 bits as a signed value so the narrowing below is exact.
        bits = tl.where(bits >= 32768, bits - 65536, bits)
        tl.store(out_ptr + offs, bits.to(tl.int16), mask=mask)


def p12_unpack(
    payload: torch.Tensor,
    exponents: torch.Tensor,
    escape_index: torch.Tensor,
    escape_values: torch.Tensor,
    numel: int,
    block: int = 1024,
) -> torch.Tensor:
    """Decode a P12 payload into a flat bfloat16 tensor on the payload's device, bit-exactly.

    Falls back to ``p12_unpack_reference`` where Triton cannot run (see ``kernels._triton``).
    """
    if payload.dtype != torch.uint8 or payload.numel() != payload_nbytes(numel):
        raise ValueError(
            f"payload must be {payload_nbytes(numel)} uint8 bytes for {numel} values, "
            f"got {payload.numel()} {payload.dtype}"
        )
    if exponents.dtype != torch.uint8 or exponents.numel() != TABLE_SIZE:
        raise ValueError("exponent table must be 16 uint8 values")
    if not HAVE_TRITON or not launchable(_p12_unpack_kernel, payload.device):
        return p12_unpack_reference(payload, exponents, escape_index, escape_values, numel)
    out = torch.empty(numel, dtype=torch.int16, device=payload.device)
    if numel:
        grid = (triton.cdiv(numel, block),)
        _p12_unpack_kernel[grid](
            payload.contiguous(),
            exponents.to(payload.device).contiguous(),
            out,
            numel,
            2 * num_pairs(numel),
            BLOCK=block,
        )
    if escape_index.numel():
        out[escape_index.to(out.device).long()] = escape_values.to(out.device).view(torch.int16)
    return out.view(torch.bfloat16)
