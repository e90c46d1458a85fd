# mypy: disable-error-code="no-untyped-def,untyped-decorator"
# (Triton kernel signatures are read by Triton; Python annotations there would change them.)
"""Embedding lookup straight from the 12-bit BF16 packing: gather-decode rows of a P12 matrix.

An embedding table ``[rows, dim]`` stays packed; a lookup decodes only the requested rows. The
kernel decodes each gathered value as if its exponent were in the table (escaped values were
stored with index 0); :class:`RowEscapes`, built once at load time, then fixes the escaped
values of the gathered rows with fixed-shape tensor ops (no host reads, no data-dependent
shapes), so the lookup can be captured in a CUDA graph. A row holding more than ``cap``
escapes is kept as plain BF16 bits instead, so the fix-up width stays small. Layout:
``kernels.p12_layout``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels._triton import HAVE_TRITON, launchable, tl, triton, word_bytes
from kernels.p12_layout import TABLE_SIZE, num_pairs, payload_nbytes

__all__ = ["RowEscapes", "p12_embedding", "p12_gather_rows", "p12_gather_rows_reference"]


def _check(payload: torch.Tensor, exponents: torch.Tensor, rows: int, dim: int) -> None:
    if dim % 2:
        raise ValueError(f"P12 row gathers need an even row length, got {dim}")
    if payload.dtype != torch.uint8 or payload.numel() != payload_nbytes(rows * dim):
        raise ValueError(
            f"payload must be {payload_nbytes(rows * dim)} uint8 bytes "
            f"for [{rows}, {dim}], got {payload.numel()} {payload.dtype}"
        )
    if exponents.dtype != torch.uint8 or exponents.numel() != TABLE_SIZE:
        raise ValueError("exponent table must be 16 uint8 values")


def p12_gather_rows_reference(
    ids: torch.Tensor, payload: torch.Tensor, exponents: torch.Tensor, rows: int, dim: int
) -> torch.Tensor:
    """Reference: rows ``ids`` of the P12 matrix ``[rows, dim]`` as int16 bit patterns
    ``[len(ids), dim]``, every value decoded with its stored index (escapes not applied)."""
    _check(payload, exponents, rows, dim)
    ids = ids.reshape(-1).long()
    cols = torch.arange(dim, device=payload.device)
    flat = ids[:, None] * dim + cols[None, :]
    sign_mant = payload[flat].to(torch.int32)
    nib = payload[2 * num_pairs(rows * dim) + flat // 2].to(torch.int32)
    idx = (nib >> ((flat % 2) * 4).to(torch.int32)) & 0xF
    exps = exponents.to(torch.int32)[idx.long()]
    bits = ((sign_mant & 0x80) << 8) | (exps << 7) | (sign_mant & 0x7F)
    return bits.to(torch.int16)


if HAVE_TRITON:

    @triton.jit
    def _p12_gather_kernel(
        ids_ptr,
        payload_ptr,
        table_ptr,
        out_ptr,
        dim,
        index_plane,
        row_words,
        index_word0,
        BLOCK: tl.constexpr,
        WORDS: tl.constexpr,
    ):
        i = tl.program_id(0)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = cols < dim
        row = tl.load(ids_ptr + i).to(tl.int64)
        if WORDS:
            # Rows of whole words (dim % 8 == 0): both planes read as 32-bit words, adjacent
            # lanes on adjacent words (4 sign/mantissa bytes or 8 index nibbles a word).
            words = payload_ptr.to(tl.pointer_type(tl.int32))
            sw = tl.program_id(1) * (BLOCK // 4) + tl.arange(0, BLOCK // 4)
            sword = tl.load(words + row * row_words + sw, mask=sw < row_words, other=0)
            sign_mant = tl.reshape(word_bytes(sword[None, :]), [BLOCK])
            iw = tl.program_id(1) * (BLOCK // 8) + tl.arange(0, BLOCK // 8)
            iword = tl.load(
                words + index_word0 + row * (row_words // 2) + iw, mask=iw < row_words // 2, other=0
            )
            nib = word_bytes(iword[None, :])
            idx = tl.reshape(
                (nib[:, :, None] >> (tl.arange(0, 2) * 4)[None, None, :]) & 0xF, [BLOCK]
            )
        else:  # rows not on word boundaries (no GLM-5.3-Flash table): one byte per value
            flat = row * dim + cols
            sign_mant = tl.load(payload_ptr + flat, mask=mask, other=0).to(tl.int32)
            nib = tl.load(payload_ptr + index_plane + flat // 2, mask=mask, other=0).to(tl.int32)
            idx = (nib >> ((cols % 2) * 4)) & 0xF
        exp = tl.load(table_ptr + idx, mask=mask, other=0).to(tl.int32)
        bits = ((sign_mant & 0x80) << 8) | (exp << 7) | (sign_mant & 0x7F)
        bits = tl.where(bits >= 32768, bits - 65536, bits)  # low 16 bits, signed
        tl.store(out_ptr + i.to(tl.int64) * dim + cols, bits.to(tl.int16), mask=mask)


def p12_gather_rows(
    ids: torch.Tensor,
    payload: torch.Tensor,
    exponents: torch.Tensor,
    rows: int,
    dim: int,
    block: int = 2048,
) -> torch.Tensor:
    """Triton gather-decode, same result as :func:`p12_gather_rows_reference` (bit-exact).

    Falls back to the reference where Triton cannot run (see ``kernels._triton``).
    """
    _check(payload, exponents, rows, dim)
    if not HAVE_TRITON or not launchable(_p12_gather_kernel, payload.device):
        return p12_gather_rows_reference(ids, payload, exponents, rows, dim)
    ids = ids.reshape(-1).contiguous()
    out = torch.empty(ids.numel(), dim, dtype=torch.int16, device=payload.device)
    if block % 8 or block & (block - 1):
        raise ValueError(f"block must be a power of two >= 8, got {block}")
    if ids.numel():
        payload = payload.contiguous()
        index_plane = 2 * num_pairs(rows * dim)
        # Word reads need every row on a word in both planes: dim % 8 == 0 (then the index
        # plane starts on a word too). Copying the table to pad it would cost more than the
        # lookup, so other shapes read bytes.
        words = dim % 8 == 0 and payload.data_ptr() % 4 == 0
        grid = (ids.numel(), triton.cdiv(dim, block))
        _p12_gather_kernel[grid](
            ids,
            payload,
            exponents.contiguous(),
            out,
            dim,
            index_plane,
            dim // 4,
            index_plane // 4,
            BLOCK=block,
            WORDS=words,
        )
    return out


@dataclass(frozen=True)
class RowEscapes:
    """A P12 matrix's escapes arranged for fixing gathered rows with fixed-shape ops.

    ``starts`` (int64 ``[rows + 1]``) are CSR offsets into ``cols`` / ``delta``; ``delta`` is
    each escape's correction ``true bits - decoded bits`` modulo 2^16 (int16), so adding it
    (wrapping) turns the decoded value into the stored one, and a padding slot adds 0.
    ``width`` is the most escapes any kept row has. Rows with more than ``cap`` escapes are
    stored whole in ``dense_rows`` (int16 bits) at ``dense_slot[row]`` (-1 for other rows).
    """

    starts: torch.Tensor
    cols: torch.Tensor
    delta: torch.Tensor
    width: int
    dense_slot: torch.Tensor
    dense_rows: torch.Tensor

    @classmethod
    def build(
        cls,
        payload: torch.Tensor,
        exponents: torch.Tensor,
        escape_index: torch.Tensor,
        escape_values: torch.Tensor,
        rows: int,
        dim: int,
        cap: int = 32,
    ) -> RowEscapes:
        """Arrange the escapes (host work, once at load time)."""
        _check(payload, exponents, rows, dim)
        dev = payload.device
        idx = escape_index.to(dev).long()
        true_bits = escape_values.to(dev).view(torch.int16).to(torch.int32) & 0xFFFF
        sign_mant = payload[idx].to(torch.int32)
        stored = (
            ((sign_mant & 0x80) << 8) | (exponents.to(torch.int32)[0] << 7) | (sign_mant & 0x7F)
        )
        delta = (true_bits - stored) & 0xFFFF
        row_of = idx // dim
        counts = (
            torch.bincount(row_of, minlength=rows)
            if idx.numel()
            else torch.zeros(rows, dtype=torch.int64, device=dev)
        )
        heavy = counts > cap
        heavy_rows = heavy.nonzero().reshape(-1)
        dense_slot = torch.full((rows,), -1, dtype=torch.int64, device=dev)
        dense_slot[heavy_rows] = torch.arange(heavy_rows.numel(), device=dev)
        if heavy_rows.numel():
            dense = p12_gather_rows_reference(heavy_rows, payload, exponents, rows, dim)
            keep_h = heavy[row_of]
            h_idx = idx[keep_h]
            slot = dense_slot[h_idx // dim]
            dense.view(-1)[slot * dim + h_idx % dim] = true_bits[keep_h].to(torch.int16)
        else:
            dense = torch.zeros(0, dim, dtype=torch.int16, device=dev)
        keep = ~heavy[row_of] if idx.numel() else torch.zeros(0, dtype=torch.bool, device=dev)
        counts = torch.where(heavy, 0, counts)
        starts = torch.zeros(rows + 1, dtype=torch.int64, device=dev)
        starts[1:] = torch.cumsum(counts, 0)
        width = int(counts.max()) if rows else 0
        wrapped = torch.where(delta[keep] >= 32768, delta[keep] - 65536, delta[keep])
        return cls(starts, (idx[keep] % dim), wrapped.to(torch.int16), width, dense_slot, dense)

    def apply(self, bits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """Fix the escapes of gathered rows ``bits`` (int16 ``[n, dim]``) of rows ``ids``."""
        ids = ids.reshape(-1).long()
        if self.width:
            lo = self.starts[ids]
            j = lo[:, None] + torch.arange(self.width, device=bits.device)[None, :]
            valid = j < self.starts[ids + 1][:, None]
            j = torch.where(valid, j, 0)
            cols = torch.where(valid, self.cols[j], 0)
            delta = torch.where(valid, self.delta[j], 0).to(torch.int16)
            # Integer adds commute, so a padding slot (adding 0 at column 0) and the
            # scatter's order change nothing: replays stay bit-identical.
            bits = bits.scatter_add(1, cols, delta)
        if self.dense_rows.shape[0]:
            slot = self.dense_slot[ids]
            bits = torch.where((slot >= 0)[:, None], self.dense_rows[slot.clamp(min=0)], bits)
        return bits


def p12_embedding(
    ids: torch.Tensor,
    payload: torch.Tensor,
    exponents: torch.Tensor,
    escapes: RowEscapes,
    rows: int,
    dim: int,
) -> torch.Tensor:
    """Rows ``ids`` (any shape) of the P12 matrix ``[rows, dim]`` as bfloat16 ``[*ids, dim]``,
    bit-exactly; ids outside ``[0, rows)`` are clamped (vLLM masks them beforehand)."""
    flat = ids.reshape(-1).long().clamp(0, max(rows - 1, 0))
    bits = escapes.apply(p12_gather_rows(flat, payload, exponents, rows, dim), flat)
    return bits.view(torch.bfloat16).reshape(*ids.shape, dim)
