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

from kernels._triton import HAVE_TRITON, launchable, tl, triton, word_bytes
from kernels.p12_layout import TABLE_SIZE, num_pairs, p12_unpack_reference, payload_nbytes

__all__ = ["p12_unpack", "p12_unpack_reference", "word_planes"]

if HAVE_TRITON:

    @triton.jit
    def _p12_unpack_kernel(
        payload_ptr,
        table_ptr,
        out_ptr,
        numel,
        index_word0,
        sign_words,
        index_words,
        BLOCK: tl.constexpr,
    ):
        # Both planes are read as 32-bit words, adjacent lanes on adjacent words (was one
        # LDG.E.U8 per value and per nibble): 4 sign/mantissa bytes or 8 index nibbles a word.
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < numel
        words = payload_ptr.to(tl.pointer_type(tl.int32))
        sw = pid * (BLOCK // 4) + tl.arange(0, BLOCK // 4)
        sword = tl.load(words + sw, mask=sw < sign_words, other=0)
        sign_mant = tl.reshape(word_bytes(sword[None, :]), [BLOCK])
        iw = pid * (BLOCK // 8) + tl.arange(0, BLOCK // 8)
        iword = tl.load(words + index_word0 + iw, mask=iw < index_words, other=0)
        nib_byte = word_bytes(iword[None, :])
        idx = tl.reshape(
            (nib_byte[:, :, None] >> (tl.arange(0, 2) * 4)[None, None, :]) & 0xF, [BLOCK]
        )
        exp = tl.load(table_ptr + idx, mask=mask, other=0).to(tl.int32)
        bits = ((sign_mant & 0x80) << 8) | (exp << 7) | (sign_mant & 0x7F)
        # Keep the low 16 bits as a signed value so the narrowing below is exact.
        bits = tl.where(bits >= 32768, bits - 65536, bits)
        tl.store(out_ptr + offs, bits.to(tl.int16), mask=mask)


def word_planes(payload: torch.Tensor, numel: int) -> tuple[torch.Tensor, int]:
    """The payload with each plane starting on a 32-bit word, and the index plane's first word.

    The kernels read both planes as words. A payload on a 4-byte boundary with ``numel`` a
    multiple of 8 (both planes whole words: every GLM-5.3-Flash tensor) is used as is; any
    other is copied once with each plane zero-padded to a word (in memory only: the stored
    format is unchanged).
    """
    pairs = num_pairs(numel)
    payload = payload.contiguous()
    if payload.data_ptr() % 4 == 0 and pairs % 4 == 0:
        return payload, 2 * pairs // 4
    sign, index = payload[: 2 * pairs], payload[2 * pairs :]
    sign = torch.nn.functional.pad(sign, (0, -sign.numel() % 4))
    return torch.cat(
        [sign, torch.nn.functional.pad(index, (0, -index.numel() % 4))]
    ), sign.numel() // 4


def p12_unpack(
    payload: torch.Tensor,
    exponents: torch.Tensor,
    escape_index: torch.Tensor,
    escape_values: torch.Tensor,
    numel: int,
    block: int = 4096,
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
        if block % 8 or block & (block - 1):
            raise ValueError(f"block must be a power of two >= 8, got {block}")
        words, index_word0 = word_planes(payload, numel)
        grid = (triton.cdiv(numel, block),)
        _p12_unpack_kernel[grid](
            words,
            exponents.to(payload.device).contiguous(),
            out,
            numel,
            index_word0,
            triton.cdiv(numel, 4),
            triton.cdiv(numel, 8),
            BLOCK=block,
        )
    if escape_index.numel():
        out[escape_index.to(out.device).long()] = escape_values.to(out.device).view(torch.int16)
    return out.view(torch.bfloat16)
