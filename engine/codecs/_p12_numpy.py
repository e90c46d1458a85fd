"""The P12 codec in numpy: the fallback where the compiled loops (``_p12c``) are not built.

Same layout and output as ``_p12c`` (``kernels.p12_layout``); ``engine.codecs.p12`` picks
the backend. The codec works over numpy views in chunks sized for the cache: every pass is a
whole-array operation on a chunk that stays in the cache, and only the first read and the final
write touch main memory. When the 16 exponents form a contiguous range (the usual case for
weights) packing is pure arithmetic; otherwise a 64 Ki-entry table maps each pair of exponents
to its index byte.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from kernels.p12_layout import TABLE_SIZE, num_pairs

__all__ = ["CHUNK_PAIRS", "decode", "encode"]

#: Pairs of values per chunk. Large enough that per-call overhead is small, small enough that a
#: chunk's scratch (two 512 KiB buffers) stays in the cache; 2^17 measured best (2^15..2^20
#: tried with bench/targets/p12_throughput.py).
CHUNK_PAIRS = 1 << 17

U16 = np.ndarray[Any, np.dtype[np.uint16]]
U32 = np.ndarray[Any, np.dtype[np.uint32]]
U8 = np.ndarray[Any, np.dtype[np.uint8]]
I16 = np.ndarray[Any, np.dtype[np.int16]]
I64 = np.ndarray[Any, np.dtype[np.int64]]


def _as_pairs(u: U16) -> U32:
    """View an even-length uint16 array as uint32 pairs, copying only if it is misaligned."""
    if u.ctypes.data % 4:
        u = u.copy()
    return u.view(np.uint32)


def _pair_index_lut(index_of: I16) -> U16:
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
    """Chunked P12 encoder over one tensor; see ``kernels.p12_layout`` for the layout."""

    def __init__(self, table: U8, index_of: I16) -> None:
        self.index_of = index_of
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


def encode(u: U16, table: U8, index_of: I16, payload: U8) -> I64:
    """Write the P12 payload of ``u`` into ``payload``; return the escaped positions.

    ``index_of`` maps an exponent to its index in ``table``, -1 where it has none.
    """
    n = u.size
    pairs = num_pairs(n)
    sign_mant, nibbles = payload[: 2 * pairs], payload[2 * pairs :]
    full = n // 2
    packer = _Packer(table, index_of)
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
    if not flagged:
        return np.zeros(0, dtype=np.int64)
    # Resolve flagged pairs to values, and store escaped values with index 0.
    fp = np.concatenate(flagged)
    vals = np.stack((2 * fp, 2 * fp + 1), axis=1).reshape(-1)
    vals = vals[vals < n]
    idx = index_of[(u[vals] >> 7) & 0xFF]
    both = np.zeros(2 * fp.size, dtype=np.int16)
    both[: vals.size] = np.maximum(idx, 0)
    both = both.reshape(-1, 2)
    nibbles[fp] = (both[:, 0] | (both[:, 1] << 4)).astype(np.uint8)
    escaped: I64 = vals[idx < 0].astype(np.int64)
    return escaped


def _exponent_lut(table: U8) -> U32:
    """Index byte -> both exponents placed at their bf16 bit positions within a uint32 pair."""
    nib = np.arange(256)
    tab = table.astype(np.uint32)
    lut: U32 = ((tab[nib & 0xF] << 7) | (tab[nib >> 4] << 23)).astype(np.uint32)
    return lut


def decode(payload: U8, table: U8, escape_index: I64, escape_values: U16, out: U16) -> None:
    """Decode ``payload`` and its escapes into ``out`` (uint16 bit patterns, ``n`` values)."""
    n = out.size
    pairs = num_pairs(n)
    nibbles = payload[2 * pairs :]
    exp_lut = _exponent_lut(table)
    direct = n % 2 == 0 and out.ctypes.data % 4 == 0
    words = out.view(np.uint32) if direct else np.empty(pairs, dtype=np.uint32)
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
    if not direct:
        out[:] = words.view(np.uint16)[:n]
    if escape_index.size:
        out[escape_index] = escape_values
