"""Lossless 12-bit packing of BF16 tensors ("P12").

Each value keeps its sign and 7-bit mantissa; its 8-bit exponent becomes a 4-bit index into a
per-tensor table of the 16 most frequent exponents. Values with any other exponent are escaped:
their raw 16 bits go to a sparse list. Bit layout: ``kernels.bf16_layout``. The round trip is
bit-exact for every pattern (NaN payloads, infinities, subnormals, -0.0).

The codec runs on the CPU over numpy views of the tensor's memory, in chunks sized for the
cache: every pass over a chunk is a vectorised whole-array operation, and only the input read
and the output write touch main memory (see ``bench/bf16pack_throughput.py``). When the 16
exponents form a contiguous range (the usual case for weights) packing is pure arithmetic;
otherwise a 64 Ki-entry table maps each pair of exponents to its index byte.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from engine.quant.format import (
    P12_ESCAPE_INDEX_SUFFIX,
    P12_ESCAPE_VALUE_SUFFIX,
    P12_EXPONENTS_SUFFIX,
    P12_PAYLOAD_SUFFIX,
    P12_SHAPE_SUFFIX,
)
from kernels.bf16_layout import TABLE_SIZE, num_pairs, payload_nbytes

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


#: Pairs of values per chunk. Large enough that per-call overhead is small, small enough that a
#: chunk's scratch (two 512 KiB buffers) stays in the cache; 2^17 measured best (2^15..2^20
#: tried with bench/bf16pack_throughput.py).
CHUNK_PAIRS = 1 << 17
#: Tensors up to this many values get an exact exponent histogram; larger ones are counted on
#: ``SAMPLE_BLOCKS`` evenly spread blocks of this many values in all (the table only affects
#: the escape count, never correctness). If the sampled table escapes more than
#: ``RETRY_ESCAPE_SHARE`` of the values, the tensor is repacked with an exact histogram.
EXACT_HISTOGRAM_MAX = 1 << 18
SAMPLE_BLOCKS = 64
RETRY_ESCAPE_SHARE = 1 / 256

U16 = np.ndarray[Any, np.dtype[np.uint16]]
U32 = np.ndarray[Any, np.dtype[np.uint32]]
U8 = np.ndarray[Any, np.dtype[np.uint8]]


def _as_u16(t: torch.Tensor) -> U16:
    """The tensor's bit patterns as a flat uint16 numpy array (no copy when contiguous on CPU)."""
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    return flat.view(torch.int16).numpy().view(np.uint16)


def _as_pairs(u: U16) -> U32:
    """View an even-length uint16 array as uint32 pairs, copying only if it is misaligned."""
    if u.ctypes.data % 4:
        u = u.copy()
    return u.view(np.uint32)


def _histogram(u: U16, exact: bool = False) -> np.ndarray[Any, np.dtype[np.int64]]:
    """Exponent counts: exact for small tensors, else from evenly spread contiguous blocks.

    Blocks (not a strided sample) so that a periodic structure such as zeroed columns cannot
    alias with the sampling stride.
    """
    if exact or u.size <= EXACT_HISTOGRAM_MAX:
        sample = u
    else:
        block = EXACT_HISTOGRAM_MAX // SAMPLE_BLOCKS
        starts = np.linspace(0, u.size - block, SAMPLE_BLOCKS).astype(np.int64)
        # One gather and one count: per-block numpy calls cost more than the counting.
        sample = np.concatenate([u[s : s + block] for s in starts])
    counts: np.ndarray[Any, np.dtype[np.int64]] = np.bincount(
        (sample >> 7) & 0xFF, minlength=256).astype(np.int64)
    return counts


def exponent_table(t: torch.Tensor) -> torch.Tensor:
    """The 16 most frequent exponents of ``t`` as uint8[16], ascending.

    Ties, and the filler slots of a tensor with fewer than 16 distinct exponents, go to the
    smaller exponent, so the table is deterministic.
    """
    return _table_from_counts(_histogram(_as_u16(t)))


def _table_from_counts(counts: np.ndarray[Any, np.dtype[np.int64]]) -> torch.Tensor:
    key = counts * 256 + (255 - np.arange(256, dtype=np.int64))
    top = np.sort(np.argpartition(-key, TABLE_SIZE)[:TABLE_SIZE])
    return torch.from_numpy(top.astype(np.uint8))


def _index_of(table: U8) -> np.ndarray[Any, np.dtype[np.int16]]:
    """Exponent -> table index, -1 where the exponent is not in the table."""
    idx = np.full(256, -1, dtype=np.int16)
    idx[table[::-1]] = np.arange(TABLE_SIZE - 1, -1, -1, dtype=np.int16)  # first slot wins
    return idx


def _pair_index_lut(index_of: np.ndarray[Any, np.dtype[np.int16]]) -> U16:
    """(exponent_even | exponent_odd << 8) -> index byte, with bit 8 set if either escapes."""
    idx = index_of.astype(np.int32)
    # Row = the odd value's exponent (high byte), column = the even one's: an outer
    # combination of two 256-entry vectors, built by broadcasting (no 64 Ki gathers).
    lo, hi = np.maximum(idx, 0)[None, :], np.maximum(idx, 0)[:, None]
    esc = (idx < 0)[None, :] | (idx < 0)[:, None]
    lut: U16 = (lo | (hi << 4) | (esc.astype(np.int32) << 8)).astype(np.uint16).reshape(-1)
    return lut


_ROW = 2048  # first-level row of the sparse search
_SUB = 128  # second-level row


def _nonzero_sparse(x: np.ndarray[Any, Any]) -> np.ndarray[Any, np.dtype[np.intp]]:
    """Indices of the non-zero entries of a mostly-zero array, in ascending order.

    Two levels of max-reductions (rows of 2048, then rows of 128 within the rows that have
    anything) narrow the search, so the index scan itself touches only a few short rows.
    """
    full = x.size - x.size % _ROW
    parts: list[np.ndarray[Any, np.dtype[np.intp]]] = []
    if full:
        rows = x[:full].reshape(-1, _ROW)
        hot = np.flatnonzero(np.maximum.reduce(rows, axis=1))
        if hot.size:
            sub = rows[hot].reshape(-1, _SUB)
            hot_sub = np.flatnonzero(np.maximum.reduce(sub, axis=1))
            r, col = np.nonzero(sub[hot_sub])
            per_row = _ROW // _SUB
            sub_row = hot_sub[r]
            parts.append(hot[sub_row // per_row] * _ROW + (sub_row % per_row) * _SUB + col)
    if full < x.size:
        parts.append(np.flatnonzero(x[full:]) + full)
    if not parts:
        return np.zeros(0, dtype=np.intp)
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


class _Packer:
    """Chunked P12 encoder over one tensor; see ``kernels.bf16_layout`` for the layout."""

    def __init__(self, table: U8) -> None:
        self.index_of = _index_of(table)
        lo, hi = int(table.min()), int(table.max())
        self.base = lo if hi - lo == TABLE_SIZE - 1 else None
        self.pair_lut = None if self.base is not None else _pair_index_lut(self.index_of)
        self.a = np.empty(CHUNK_PAIRS, np.uint32)
        self.b = np.empty(CHUNK_PAIRS, np.uint32)
        self.k = np.empty(CHUNK_PAIRS, np.uint16)
        self.k_t = torch.from_numpy(self.k.view(np.int16))
        self.pair_lut_t = (
            None if self.pair_lut is None else torch.from_numpy(self.pair_lut.view(np.int16))
        )

    def chunk(self, c: U32, sign_mant: U8, nibbles: U8) -> np.ndarray[Any, np.dtype[np.intp]]:
        """Encode pairs ``c``; returns the chunk-relative indices of pairs holding an escape."""
        m = c.size
        a, b = self.a[:m], self.b[:m]
        np.right_shift(c, 7, out=a)
        np.bitwise_and(a, 0x00FF00FF, out=a)  # exponent_even | exponent_odd << 16
        if self.base is not None:
            # Each 16-bit half becomes h = 256 + e - base: in the table iff h is 0x100..0x10F,
            # and then its low 4 bits are the index. The low byte of a | a >> 12 holds both
            # indices; pairs with an escape get their index byte rewritten by the caller.
            np.add(a, np.uint32(0x01000100 - self.base * 0x00010001), out=a)
            np.right_shift(a, 12, out=b)
            np.bitwise_or(b, a, out=b)
            np.copyto(nibbles, b, casting="unsafe")
            np.bitwise_xor(a, 0x01000100, out=a)
            np.bitwise_and(a, 0xFFF0FFF0, out=a)  # zero iff both halves are in the table
            flagged = _nonzero_sparse(a)
        else:
            assert self.pair_lut is not None
            k = self.k[:m]
            np.right_shift(a, 8, out=b)
            np.bitwise_or(a, b, out=a)
            np.bitwise_and(a, 0xFFFF, out=a)
            # torch's gather is about twice as fast as np.take here; both views share memory.
            assert self.pair_lut_t is not None
            torch.index_select(
                self.pair_lut_t, 0, torch.from_numpy(a.view(np.int32)), out=self.k_t[:m]
            )
            np.copyto(nibbles, k, casting="unsafe")
            np.right_shift(k, 8, out=k)
            flagged = _nonzero_sparse(k)
        # Sign and mantissa: keep bits 15 and 6..0, then fold the sign onto bit 7.
        bu, au = b.view(np.uint16), a.view(np.uint16)
        np.bitwise_and(c.view(np.uint16), 0x807F, out=bu)
        np.right_shift(bu, 8, out=au)
        np.bitwise_or(bu, au, out=bu)
        np.copyto(sign_mant, bu, casting="unsafe")
        return flagged


def pack(t: torch.Tensor, exponents: torch.Tensor | None = None) -> PackedBF16:
    """Pack a bfloat16 tensor to 12 bits per value (plus escapes). Runs on the CPU."""
    if t.dtype != torch.bfloat16:
        raise TypeError(f"P12 packs bfloat16 tensors, got {t.dtype}")
    u = _as_u16(t)
    if exponents is not None:
        table_t = torch.unique(exponents.to(torch.uint8).cpu())
        if table_t.numel() != TABLE_SIZE:
            raise ValueError("P12 exponent table must hold 16 distinct exponents")
        return _pack_with_table(u, table_t, tuple(t.shape))
    table_t = _table_from_counts(_histogram(u))
    packed = _pack_with_table(u, table_t, tuple(t.shape))
    if u.size > EXACT_HISTOGRAM_MAX and packed.escape_index.numel() > RETRY_ESCAPE_SHARE * u.size:
        exact = _table_from_counts(_histogram(u, exact=True))
        if not torch.equal(exact, table_t):
            packed = _pack_with_table(u, exact, tuple(t.shape))
    return packed


def _pack_with_table(u: U16, table_t: torch.Tensor, shape: tuple[int, ...]) -> PackedBF16:
    n = u.size
    table = table_t.numpy()
    pairs = num_pairs(n)
    payload = np.empty(3 * pairs, dtype=np.uint8)
    sign_mant, nibbles = payload[: 2 * pairs], payload[2 * pairs :]
    full = n // 2
    packer = _Packer(table)
    flagged: list[np.ndarray[Any, np.dtype[np.intp]]] = []
    if full:
        w = _as_pairs(u[: 2 * full])
        for s in range(0, full, CHUNK_PAIRS):
            e = min(s + CHUNK_PAIRS, full)
            f = packer.chunk(w[s:e], sign_mant[2 * s : 2 * e], nibbles[s:e])
            if f.size:
                flagged.append(f + s)
    if n % 2:
        last = np.zeros(2, dtype=np.uint16)
        last[0] = u[-1]
        tail = np.zeros(1, dtype=np.uint8)
        f = packer.chunk(last.view(np.uint32), sign_mant[-2:], tail)
        nibbles[-1] = tail[0]
        if f.size:
            flagged.append(np.array([full], dtype=np.intp))
    escape_index = np.zeros(0, dtype=np.int64)
    if flagged:
        # Resolve flagged pairs to values, and store escaped values with index 0.
        fp = np.concatenate(flagged)
        vals = np.stack((2 * fp, 2 * fp + 1), axis=1).reshape(-1)
        vals = vals[vals < n]
        idx = packer.index_of[(u[vals] >> 7) & 0xFF]
        escape_index = vals[idx < 0].astype(np.int64)
        both = np.zeros(2 * fp.size, dtype=np.int16)
        both[: vals.size] = np.maximum(idx, 0)
        both = both.reshape(-1, 2)
        nibbles[fp] = (both[:, 0] | (both[:, 1] << 4)).astype(np.uint8)
    raw = u[escape_index]
    return PackedBF16(
        torch.from_numpy(payload),
        table_t,
        torch.from_numpy(escape_index),
        torch.from_numpy(raw.view(np.int16)).view(torch.uint16),
        shape,
    )


def _exponent_lut(table: U8) -> U32:
    """Index byte -> both exponents placed at their bf16 bit positions within a uint32 pair."""
    nib = np.arange(256)
    tab = table.astype(np.uint32)
    lut: U32 = ((tab[nib & 0xF] << 7) | (tab[nib >> 4] << 23)).astype(np.uint32)
    return lut


def unpack(p: PackedBF16, out: torch.Tensor | None = None) -> torch.Tensor:
    """Decode a :class:`PackedBF16` back into the exact original bfloat16 tensor.

    A payload on the CPU is decoded by the numpy codec; one on a GPU by the Triton kernel
    (``kernels.bf16_unpack``), on that GPU.

    ``out``, if given, is a contiguous CPU bfloat16 tensor of the right size written in place
    (e.g. a model parameter), which saves one allocation.
    """
    n = p.numel
    if p.payload.is_cuda:  # decode where the payload lies, with the Triton kernel
        from kernels.bf16_unpack import bf16_unpack

        decoded = bf16_unpack(p.payload, p.exponents, p.escape_index, p.escape_values, n)
        if out is None:
            return decoded.reshape(p.shape)
        return out.copy_(decoded.reshape(out.shape))
    pairs = num_pairs(n)
    payload = p.payload.detach().cpu().contiguous().numpy()
    if payload.ctypes.data % 2:
        payload = payload.copy()
    nibbles = payload[2 * pairs :]
    exp_lut = _exponent_lut(p.exponents.cpu().numpy())
    if out is not None and (out.dtype != torch.bfloat16 or out.numel() != n):
        raise ValueError(f"out must be a bfloat16 tensor of {n} values")
    direct = _writable_pairs(out, n)
    words = direct if direct is not None else np.empty(pairs, dtype=np.uint32)
    plane = payload[: 2 * pairs]
    signs = np.empty(2 * CHUNK_PAIRS, dtype=np.uint16)
    for s in range(0, pairs, CHUNK_PAIRS):
        e = min(s + CHUNK_PAIRS, pairs)
        o = words[s:e]
        np.take(exp_lut, nibbles[s:e], out=o)  # both exponents in place: exponent << 7 each
        o16, b, sg = o.view(np.uint16), plane[2 * s : 2 * e], signs[: 2 * (e - s)]
        # Per value: (exponent << 7) + (sign << 7 | mantissa) + 255 * (sign << 7) is, modulo
        # 2^16, exponent << 7 + mantissa + sign << 15: three disjoint fields, i.e. the bf16 bits.
        np.add(o16, b, out=o16)
        np.bitwise_and(b, 0x80, out=sg, casting="unsafe")
        np.multiply(sg, np.uint16(255), out=sg)
        np.add(o16, sg, out=o16)
    flat = words.view(np.uint16)[:n]
    if p.escape_index.numel():
        flat[p.escape_index.cpu().numpy()] = p.escape_values.cpu().view(torch.int16).numpy()
    if out is None:
        return torch.from_numpy(flat.view(np.int16)).view(torch.bfloat16).reshape(p.shape)
    if direct is None:
        out.copy_(torch.from_numpy(flat.view(np.int16)).view(torch.bfloat16).reshape(out.shape))
    return out


def _writable_pairs(out: torch.Tensor | None, n: int) -> U32 | None:
    """``out``'s memory as uint32 pairs when the decoder can write there directly."""
    if out is None or n % 2 or out.device.type != "cpu" or not out.is_contiguous():
        return None
    u = out.view(torch.int16).reshape(-1).numpy().view(np.uint16)
    if u.ctypes.data % 4:
        return None
    return u.view(np.uint32)
