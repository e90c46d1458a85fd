# mypy: disable-error-code="no-untyped-def,untyped-decorator"
# (Triton kernel signatures are read by Triton; Python annotations there would change them.)
"""Weight tiles of the fused MoE (``kernels.w2_moe``): packed rows in, exact bf16 tiles out.

Both helpers read ``W[rows, k0 : k0 + BLOCK_K]`` as a ``[rows, BLOCK_K]`` tile laid out as
it is stored, row by row with the bytes of a row contiguous along K (W2: byte address
``row * K/4 + k/4``; NVFP4 ``row * K/2 + k/2``), so every byte of a tile is requested once
and a warp's load covers whole runs of a row: at ``BLOCK_K = 128`` a row step is 32 code bytes
(W2) or 64 (FP4), and Triton issues 64- or 128-bit ``cp.async`` per thread. The bytes are
unpacked in registers with shifts and a ``tl.reshape`` (4 codes per byte, lowest column in
the lowest bits; 2 nibbles per byte, even column low), and the group scales, loaded as
``[rows, BLOCK_K / 32]`` (W2) or ``[rows, BLOCK_K / 16]`` (FP4), are broadcast over their
groups. The caller multiplies with ``tl.dot(a, tl.trans(tile))``.

The row strides are hinted to Triton (``tl.multiple_of``): the caller guarantees
``K % BLOCK_K == 0`` (``kernels.w2_moe`` checks it), so every row's step starts at a multiple
of ``BLOCK_K / 4`` code bytes and ``BLOCK_K / 32`` scale bytes; without the hint Triton sees
only 4-aligned strides and splits the row loads into 32-bit pieces (or bytes).

Values are exact in bf16, so both tiles are bf16 and the product with an activation is the
same whatever order the hardware sums in within one ``tl.dot`` step:

* W2: ``CODEBOOK[c] * s`` for a ue5m3 scale ``s`` is ``s`` with the exponent raised by 2 for
  magnitude 4 and the sign set for codes 0 and 1, so the bf16 bits are built with integer
  ops: ``(s + SCALE_FP32_OFFSET) << 4`` (the scale's fp32 pattern, top half) plus a per-code
  addend from a 4-entry byte table ``0x01008081`` (code 0: sign + exponent 2, 1: sign, 2: 0,
  3: exponent 2). No float multiply, select or conversion per weight.
* NVFP4: the e2m1 value's fp32 bits come from integer ops (normal codes 2..7 are their 3
  bits shifted onto the exponent and mantissa over a bias of 126; 0.5 and 0 by a select),
  then one float multiply by the e4m3 block scale (decoded with integer ops, subnormals
  too); e2m1 (2 significant bits) times e4m3 (4) fits bf16's 8.
"""

from __future__ import annotations

from kernels._triton import HAVE_TRITON, tl, triton

__all__: list[str] = []

if HAVE_TRITON:

    @triton.jit
    def _w2_tile(
        packed_ptr,
        scale_ptr,
        rows,
        row_ok,
        k0,
        n_cols,
        SCALE_OFFSET: tl.constexpr,
        BLOCK_K: tl.constexpr,
    ):
        """W2 weights ``W[rows, k0:k0+BLOCK_K]`` as an exact ``[rows, BLOCK_K]`` bf16 tile."""
        row_bytes = tl.multiple_of(n_cols // 4, BLOCK_K // 4)
        k0 = tl.multiple_of(k0, BLOCK_K)
        j = k0 // 4 + tl.arange(0, BLOCK_K // 4)
        byte = tl.load(
            packed_ptr + rows[:, None] * row_bytes + j[None, :], mask=row_ok[:, None], other=0
        ).to(tl.int32)
        # A row's BLOCK_K / 32 (<= 4) scale bytes of this step lie in one aligned 32-bit word
        # (K % BLOCK_K == 0): one 32-bit load per row, the bytes taken out with shifts.
        first = rows * (n_cols // 32) + k0 // 32
        word = tl.load(scale_ptr.to(tl.pointer_type(tl.int32)) + first // 4, mask=row_ok, other=0)
        shift = 8 * tl.arange(0, BLOCK_K // 32)[None, :]
        if BLOCK_K < 128:  # the step's bytes may start inside the word
            shift += ((first % 4) * 8)[:, None]
        sb = (word[:, None] >> shift) & 0xFF  # [R, BLOCK_K/32]
        # Per group: the scale's bf16 bits (its fp32 pattern's top half) and the code table
        # (a zero scale gets a zero table: every code is then +0). Interleaving a tensor with
        # itself repeats each element in place, in registers: 8 code bytes per group.
        sbits = tl.where(sb == 0, 0, (sb + SCALE_OFFSET) << 4)
        table = tl.where(sb == 0, 0, 0x01008081)
        for _ in tl.static_range(3):
            sbits = tl.interleave(sbits, sbits)
            table = tl.interleave(table, table)
        # Code i of a byte, times 8, is (byte << 3 >> 2i) & 0x18: its table byte's shift.
        w0 = sbits + (((table >> ((byte << 3) & 0x18)) & 0xFF) << 8)
        w1 = sbits + (((table >> ((byte << 1) & 0x18)) & 0xFF) << 8)
        w2 = sbits + (((table >> ((byte >> 1) & 0x18)) & 0xFF) << 8)
        w3 = sbits + (((table >> ((byte >> 3) & 0x18)) & 0xFF) << 8)
        # Codes 0..3 of each byte side by side: columns 4j, 4j+1, 4j+2, 4j+3.
        bits = tl.interleave(tl.interleave(w0, w2), tl.interleave(w1, w3))
        return bits.to(tl.int16).to(tl.bfloat16, bitcast=True)

    @triton.jit
    def _fp4_tile(packed_ptr, scale_ptr, rows, row_ok, k0, n_cols, BLOCK_K: tl.constexpr):
        """NVFP4 ``W[rows, k0:k0+BLOCK_K] / global_scale`` as an exact bf16 tile (e2m1 times
        the e4m3 block scale); the global scale goes on the caller's accumulator."""
        row_bytes = tl.multiple_of(n_cols // 2, BLOCK_K // 2)
        row_blocks = tl.multiple_of(n_cols // 16, BLOCK_K // 16)
        k0 = tl.multiple_of(k0, BLOCK_K)
        j = k0 // 2 + tl.arange(0, BLOCK_K // 2)
        byte = tl.load(
            packed_ptr + rows[:, None] * row_bytes + j[None, :], mask=row_ok[:, None], other=0
        ).to(tl.int32)
        b = k0 // 16 + tl.arange(0, BLOCK_K // 16)
        sb = tl.load(
            scale_ptr + rows[:, None] * row_blocks + b[None, :], mask=row_ok[:, None], other=0
        ).to(tl.int32)
        se = (sb >> 3) & 0xF
        sm = sb & 7
        normal = (((se + 120) << 23) | (sm << 20)).to(tl.float32, bitcast=True)
        scale = tl.where(se == 0, sm.to(tl.float32) * 0.001953125, normal)  # e4m3 -> fp32
        for _ in tl.static_range(3):  # on each of the block's 8 bytes, in registers
            scale = tl.interleave(scale, scale)
        lo = (_e2m1_bits(byte).to(tl.float32, bitcast=True) * scale).to(tl.bfloat16)
        hi = (_e2m1_bits(byte >> 4).to(tl.float32, bitcast=True) * scale).to(tl.bfloat16)
        return tl.interleave(lo, hi)  # even column in the low nibble

    @triton.jit
    def _e2m1_bits(nib):
        """fp32 bits of the e2m1 value in the low 4 bits of ``nib``: for c = nib & 7 >= 2
        (normal) exponent and mantissa are c's 3 bits over a bias of 126; 0.5 and 0 apart."""
        c = nib & 7
        mag = tl.where(c >= 2, (c << 22) + 0x3F000000, c * 0x3F000000)
        return mag | ((nib & 8) << 28)
