"""Lossless 12-bit packing of BF16 tensors ("P12").

Each value keeps its sign and 7-bit mantissa; its 8-bit exponent becomes a 4-bit index into a
per-tensor table of the 16 most frequent exponents. Values with any other exponent are escaped:
their raw 16 bits go to a sparse list. Bit layout: ``kernels.p12_layout``. The round trip is
bit-exact for every pattern (NaN payloads, infinities, subnormals, -0.0).

This module owns the format (table choice, escapes, validation); the loops over the values run
on the CPU in one of two backends with identical output: compiled C (``_p12c``, built when the
package is installed) or numpy (``_p12_numpy``) where no C compiler was available.
``BACKEND`` says which one runs; ``bench/targets/p12_throughput.py`` measures both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from engine.codecs import _p12_numpy
from engine.codecs.format import (
    P12_ESCAPE_INDEX_SUFFIX,
    P12_ESCAPE_VALUE_SUFFIX,
    P12_EXPONENTS_SUFFIX,
    P12_PAYLOAD_SUFFIX,
    P12_SHAPE_SUFFIX,
)
from kernels.p12_layout import TABLE_SIZE, payload_nbytes

try:
    from engine.codecs import _p12c as _p12c  # re-exported: the tests check the build
except ImportError:  # built at install time; absent where no C compiler was found
    _p12c = None  # type: ignore[assignment]

__all__ = ["BACKEND", "PackedBF16", "exponent_table", "pack", "unpack"]

#: Which loops run: compiled C, or the numpy fallback (same output, about a third the speed).
BACKEND: Literal["c", "numpy"] = "c" if _p12c is not None else "numpy"


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

    def row_block(self, start: int, stop: int) -> PackedBF16:
        """Rows ``[start, stop)`` of a packed matrix as a packed matrix of their own.

        Both planes of a row range are contiguous byte ranges when a row holds an even number
        of values, so the block's payload is those two ranges joined; it shares the table.
        """
        if len(self.shape) != 2 or self.shape[1] % 2:
            raise ValueError(f"row blocks need a matrix with an even row length, got {self.shape}")
        rows, cols = self.shape
        if not 0 <= start < stop <= rows:
            raise ValueError(f"row block [{start}, {stop}) is outside {rows} rows")
        plane = 2 * ((rows * cols + 1) // 2)
        sm = self.payload[start * cols : stop * cols]
        idx = self.payload[plane + start * cols // 2 : plane + stop * cols // 2]
        lo, hi = start * cols, stop * cols
        inside = (self.escape_index >= lo) & (self.escape_index < hi)
        return PackedBF16(
            torch.cat([sm, idx]),
            self.exponents,
            self.escape_index[inside] - lo,
            self.escape_values[inside],
            (stop - start, cols),
        )

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


#: Tensors up to this many values get an exact exponent histogram; larger ones are counted on
#: ``SAMPLE_BLOCKS`` evenly spread blocks holding ``SAMPLE_SHARE`` of the values, at least
#: ``EXACT_HISTOGRAM_MAX`` and at most ``SAMPLE_MAX`` in all (the table only affects the escape
#: count, never correctness; counting costs about as much per value as packing). If the sampled
#: table escapes more than ``RETRY_ESCAPE_SHARE`` of the values, the tensor is repacked with an
#: exact histogram.
EXACT_HISTOGRAM_MAX = 1 << 16
SAMPLE_MAX = 1 << 18
SAMPLE_SHARE = 1 / 16
SAMPLE_BLOCKS = 64
RETRY_ESCAPE_SHARE = 1 / 256

U16 = np.ndarray[Any, np.dtype[np.uint16]]
U8 = np.ndarray[Any, np.dtype[np.uint8]]
I64 = np.ndarray[Any, np.dtype[np.int64]]


def _as_u16(t: torch.Tensor) -> U16:
    """The tensor's bit patterns as a flat uint16 numpy array (no copy when contiguous on CPU)."""
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    return flat.view(torch.int16).numpy().view(np.uint16)


def _numpy(t: torch.Tensor) -> np.ndarray[Any, Any]:
    """A CPU tensor's memory as a contiguous numpy array aligned for its item size.

    Tensors sliced from a memory-mapped file can sit at any byte offset; the C loops read
    whole items, so those are copied.
    """
    a = t.detach().cpu().contiguous().numpy()
    return a.copy() if a.ctypes.data % max(a.itemsize, 1) else a


def sample_block(n: int) -> int:
    """Length of each of the ``SAMPLE_BLOCKS`` blocks a tensor of ``n`` values is counted on."""
    return min(SAMPLE_MAX, max(EXACT_HISTOGRAM_MAX, int(n * SAMPLE_SHARE))) // SAMPLE_BLOCKS


def sample_starts(n: int) -> list[int]:
    """Where those blocks start: evenly spread, the last one ending at the tensor's end."""
    block = sample_block(n)
    return [i * (n - block) // (SAMPLE_BLOCKS - 1) for i in range(SAMPLE_BLOCKS)]


def _histogram(u: U16, exact: bool = False) -> I64:
    """Exponent counts: exact for small tensors, else from evenly spread contiguous blocks.

    Blocks (not a strided sample) so that a periodic structure such as zeroed columns cannot
    alias with the sampling stride.
    """
    sampled = not exact and u.size > EXACT_HISTOGRAM_MAX
    if BACKEND == "c":
        assert _p12c is not None
        counts = np.zeros(256, dtype=np.int64)
        if sampled:
            _p12c.histogram(u, counts, SAMPLE_BLOCKS, sample_block(u.size))
        else:
            _p12c.histogram(u, counts, 1, u.size)
        return counts
    sample = u
    if sampled:
        # One gather and one count: per-block numpy calls cost more than the counting.
        block = sample_block(u.size)
        sample = np.concatenate([u[s : s + block] for s in sample_starts(u.size)])
    counts = np.bincount((sample >> 7) & 0xFF, minlength=256).astype(np.int64)
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
    table = table_t.numpy()
    index_of = _index_of(table)
    payload = np.empty(payload_nbytes(u.size), dtype=np.uint8)
    if BACKEND == "c":
        escape_index = _encode_c(u, index_of, payload)
    else:
        escape_index = _p12_numpy.encode(u, table, index_of, payload)
    raw = u[escape_index]
    return PackedBF16(
        torch.from_numpy(payload),
        table_t,
        torch.from_numpy(escape_index),
        torch.from_numpy(raw.view(np.int16)).view(torch.uint16),
        shape,
    )


def _encode_c(u: U16, index_of: np.ndarray[Any, np.dtype[np.int16]], payload: U8) -> I64:
    assert _p12c is not None
    lut = index_of.astype(np.uint8)  # -1 (not in the table) becomes 0xFF, the C escape mark
    # Escapes are rare in weights; a tensor with more is packed a second time, with room.
    escapes = np.empty(max(64, u.size >> 10), dtype=np.int64)
    k = _p12c.pack(u, lut, payload, escapes)
    if k > escapes.size:
        escapes = np.empty(k, dtype=np.int64)
        k = _p12c.pack(u, lut, payload, escapes)
    out: I64 = escapes[:k].copy() if k < escapes.size // 2 else escapes[:k]
    return out


def unpack(p: PackedBF16, out: torch.Tensor | None = None) -> torch.Tensor:
    """Decode a :class:`PackedBF16` back into the exact original bfloat16 tensor.

    A payload on the CPU is decoded by the CPU codec (``BACKEND``); one on a GPU by the Triton
    kernel (``kernels.p12_unpack``), on that GPU.

    ``out``, if given, is a contiguous CPU bfloat16 tensor of the right size written in place
    (e.g. a model parameter), which saves one allocation.
    """
    n = p.numel
    if p.payload.is_cuda:  # decode where the payload lies, with the Triton kernel
        from kernels.p12_unpack import p12_unpack

        decoded = p12_unpack(p.payload, p.exponents, p.escape_index, p.escape_values, n)
        if out is None:
            return decoded.reshape(p.shape)
        return out.copy_(decoded.reshape(out.shape))
    payload, table = _numpy(p.payload), _numpy(p.exponents)
    escape_index = _numpy(p.escape_index)
    escape_values = _numpy(p.escape_values.view(torch.int16))
    if out is not None and (out.dtype != torch.bfloat16 or out.numel() != n):
        raise ValueError(f"out must be a bfloat16 tensor of {n} values")
    direct = _writable(out)
    flat = direct if direct is not None else np.empty(n, dtype=np.uint16)
    if BACKEND == "c":
        assert _p12c is not None
        _p12c.unpack(payload, table, escape_index, escape_values, flat)
    else:
        _p12_numpy.decode(payload, table, escape_index, escape_values.view(np.uint16), flat)
    if out is None:
        return torch.from_numpy(flat.view(np.int16)).view(torch.bfloat16).reshape(p.shape)
    if direct is None:
        out.copy_(torch.from_numpy(flat.view(np.int16)).view(torch.bfloat16).reshape(out.shape))
    return out


def _writable(out: torch.Tensor | None) -> U16 | None:
    """``out``'s memory as flat uint16 when the decoder can write there directly."""
    if out is None or out.device.type != "cpu" or not out.is_contiguous():
        return None
    u: U16 = out.view(torch.int16).reshape(-1).numpy().view(np.uint16)
    return u
