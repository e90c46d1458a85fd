# mypy: disable-error-code="no-untyped-def,untyped-decorator"
"""Tiny Triton kernels with known machine code for ``test_kernel_static``: byte loads from
scattered rows (must be flagged narrower than 32 bits), contiguous byte loads (vectorized to
128 bits), and a tile too large for the registers of one warp (must spill)."""

from __future__ import annotations

from kernels._triton import HAVE_TRITON, tl, triton

if HAVE_TRITON:

    @triton.jit
    def scattered_bytes(src_ptr, out_ptr, stride, BLOCK: tl.constexpr):
        rows = tl.arange(0, BLOCK)
        tl.store(out_ptr + rows, tl.load(src_ptr + rows * stride).to(tl.int32))

    @triton.jit
    def contiguous_bytes(src_ptr, out_ptr, n, BLOCK: tl.constexpr):
        total = tl.zeros([BLOCK], dtype=tl.int32)
        for k0 in range(0, n, BLOCK):
            total += tl.load(src_ptr + k0 + tl.arange(0, BLOCK)).to(tl.int32)
        tl.store(out_ptr + tl.arange(0, BLOCK), total)

    @triton.jit
    def spilling(src_ptr, out_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
        x = tl.load(src_ptr + offs)
        y = x * tl.sum(x, 0)[None, :] + tl.sum(x, 1)[:, None]
        tl.store(out_ptr + offs, y * tl.max(y, 0)[None, :])
