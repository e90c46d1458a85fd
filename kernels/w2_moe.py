# mypy: disable-error-code="no-untyped-def,untyped-decorator,attr-defined"
# (Triton kernel signatures are read by Triton; Python annotations there would change them.
# attr-defined: a kernel local that is a constant on one constexpr path is a tensor on the other.)
"""The fused W2 MoE: a layer's routed experts in three launches, FP4 pool slots inside them.

``w2_fused_moe`` is the one entry point (math and reference: ``kernels.w2_moe_layout``).
Modeled on vLLM's ``fused_moe_kernel_gptq_awq`` / ``moe_wna16``: one program per (group of
pairs routed to one expert, block of output rows), so each code byte and scale is loaded
once and applied to every token routed to that expert, with ``tl.dot`` on the dequantized
tile. Launches, all with grids fixed by the batch's shape (CUDA-graph-capturable):

1. gate+up: both halves' rows of a block at once, SwiGLU clamp, SiLU and multiply fused in
   the epilogue; writes the activation per pair. The first column block of each group also
   adds its pair count to ``expert_tokens[e]`` (an integer atomic: exact, order-free);
2. down: routed weight fused, writes one row per pair (no float atomics);
3. sum over top_k in fixed order k = 0, 1, ... (so a replay is bit-identical).

Which pairs a program takes, two ways behind the same tile code:

* **decode** (at most ``DECODE_MAX_PAIRS`` pairs): no alignment pass. The grid has one row
  of programs per pair; a program whose pair is not the first one routed to its expert exits
  at once, the others take every pair of that expert (a masked tile over all pairs);
* **prefill**: ``kernels.moe_align.moe_align`` sorts pairs by expert on the device (vLLM's
  ``moe_align_block_size`` contract) and each program takes one padded block of one expert;
  programs past the padded end exit.

Pooled experts: ``expert_slot[e] >= 0`` sends a program down the FP4 branch, which reads
that slot's NVFP4 nibbles and e4m3 scales (decoded with integer ops) instead of the W2 codes,
and applies the slot's global scale to the float32 accumulator. Nothing is dequantized to
memory. Without a usable Triton the PyTorch reference runs instead (what a CPU engine does).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels._triton import HAVE_TRITON, launchable, tl, triton
from kernels.moe_align import moe_align
from kernels.w2_layout import SCALE_FP32_OFFSET
from kernels.w2_moe_layout import MoEWeights, w2_moe_reference

__all__ = ["DECODE_MAX_PAIRS", "TileConfig", "kernels_launchable", "tile_config",
           "w2_fused_moe"]

#: Most (token, k) pairs served by the decode path (8 tokens x top-8: a k=7 verify step).
DECODE_MAX_PAIRS = 64


@dataclass(frozen=True)
class TileConfig:
    """Tile sizes of one call. ``block_m`` is the pairs per program (decode: all pairs)."""

    block_m: int
    block_n: int
    block_k: int
    aligned: bool


def tile_config(n_pairs: int) -> TileConfig:
    """Decode: narrow column blocks (many programs for bandwidth), wide K (each row's codes
    read 64 contiguous bytes at a time); prefill: square-ish tiles for ``tl.dot``."""
    if n_pairs <= DECODE_MAX_PAIRS:
        return TileConfig(max(16, triton_next_pow2(n_pairs)), 32, 256, aligned=False)
    return TileConfig(16 if n_pairs < 2048 else 64, 64, 128, aligned=True)


def triton_next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


if HAVE_TRITON:

    @triton.jit
    def _w2_tile_t(packed_ptr, scale_ptr, rows, row_ok, cols, n_cols, SCALE_OFFSET: tl.constexpr):
        """W2 weights ``W[rows, cols]`` as a ``[cols, rows]`` float32 tile (for ``tl.dot``)."""
        mask = (cols[:, None] < n_cols) & row_ok[None, :]
        byte = tl.load(packed_ptr + rows[None, :] * (n_cols // 4) + cols[:, None] // 4,
                       mask=mask, other=0).to(tl.int32)
        code = (byte >> ((cols[:, None] % 4) * 2)) & 3
        mag = tl.where((code == 0) | (code == 3), 4.0, 1.0)
        value = tl.where(code >= 2, mag, -mag)
        sbyte = tl.load(scale_ptr + rows[None, :] * (n_cols // 32) + cols[:, None] // 32,
                        mask=mask, other=0).to(tl.int32)
        scale = ((sbyte + SCALE_OFFSET) << 20).to(tl.float32, bitcast=True)
        return value * tl.where(sbyte == 0, 0.0, scale)

    @triton.jit
    def _fp4_tile_t(packed_ptr, scale_ptr, rows, row_ok, cols, n_cols):
        """NVFP4 ``W[rows, cols] / global_scale`` as a ``[cols, rows]`` tile: e2m1 times the
        e4m3 block scale, exact in bf16; the global scale goes on the accumulator."""
        mask = (cols[:, None] < n_cols) & row_ok[None, :]
        byte = tl.load(packed_ptr + rows[None, :] * (n_cols // 2) + cols[:, None] // 2,
                       mask=mask, other=0).to(tl.int32)
        nib = (byte >> ((cols[:, None] % 2) * 4)) & 0xF
        e = (nib & 7) >> 1
        m = (nib & 1).to(tl.float32)
        mag = tl.where(e == 0, 0.5 * m, tl.exp2((e - 1).to(tl.float32)) * (1.0 + 0.5 * m))
        value = tl.where((nib & 8) != 0, -mag, mag)
        sb = tl.load(scale_ptr + rows[None, :] * (n_cols // 16) + cols[:, None] // 16,
                     mask=mask, other=0).to(tl.int32)
        se = (sb >> 3) & 0xF
        sm = sb & 7
        s_normal = (((se + 120) << 23) | (sm << 20)).to(tl.float32, bitcast=True)
        return value * tl.where(se == 0, sm.to(tl.float32) * 0.001953125, s_normal)

    @triton.jit
    def _gate_up_kernel(
        x_ptr, wts_ptr, ids_ptr, sorted_ptr, block_expert_ptr, num_padded_ptr,
        w_packed_ptr, w_scale_ptr, slot_ptr, f_packed_ptr, f_scale_ptr, f_global_ptr,
        act_ptr, counts_ptr, n_pairs, hidden, inter, limit,
        TOP_K: tl.constexpr, ALIGNED: tl.constexpr, HAS_LIMIT: tl.constexpr,
        ON_INPUT: tl.constexpr, HAS_POOL: tl.constexpr, COUNT: tl.constexpr,
        SCALE_OFFSET: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    ):
        # Which pairs this program serves (inlined in both kernels: a nested jit call costs
        # the interpreter ~10 ms per program, and most decode programs exit right here).
        pid_m = tl.program_id(0)
        if ALIGNED:
            pairs = tl.load(sorted_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
            live = pairs < n_pairs
            if pid_m * BLOCK_M >= tl.load(num_padded_ptr):
                return
            expert = tl.load(block_expert_ptr + pid_m)
        else:  # all pairs in one tile; the first pair of each expert's program serves them
            pairs = tl.arange(0, BLOCK_M)
            ids = tl.load(ids_ptr + pairs, mask=pairs < n_pairs, other=-1).to(tl.int32)
            expert = tl.load(ids_ptr + pid_m).to(tl.int32)
            if tl.min(tl.where(ids == expert, pairs, BLOCK_M), 0) != pid_m:
                return
            live = ids == expert
        pid_n = tl.program_id(1)
        if COUNT:
            if pid_n == 0:
                tl.atomic_add(counts_ptr + expert, tl.sum(live.to(tl.int64), 0))
        tokens = (pairs // TOP_K).to(tl.int64)
        rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        row_ok = rows < inter
        if ON_INPUT:
            wts = tl.load(wts_ptr + pairs, mask=live, other=0.0).to(tl.float32)
        slot = -1
        if HAS_POOL:
            slot = tl.load(slot_ptr + expert)
        acc_g = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        acc_u = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        if slot >= 0:
            s = slot.to(tl.int64)
            fp = f_packed_ptr + s * (2 * inter) * (hidden // 2)
            fs = f_scale_ptr + s * (2 * inter) * (hidden // 16)
            for k0 in range(0, hidden, BLOCK_K):
                cols = k0 + tl.arange(0, BLOCK_K)
                a = tl.load(x_ptr + tokens[:, None] * hidden + cols[None, :],
                            mask=live[:, None] & (cols[None, :] < hidden), other=0.0)
                if ON_INPUT:
                    a = (a.to(tl.float32) * wts[:, None]).to(x_ptr.dtype.element_ty)
                wg = _fp4_tile_t(fp, fs, rows, row_ok, cols, hidden)
                wu = _fp4_tile_t(fp, fs, rows + inter, row_ok, cols, hidden)
                acc_g = tl.dot(a, wg.to(a.dtype), acc_g)
                acc_u = tl.dot(a, wu.to(a.dtype), acc_u)
            acc_g = acc_g * tl.load(f_global_ptr + 2 * s)
            acc_u = acc_u * tl.load(f_global_ptr + 2 * s + 1)
        else:
            e = expert.to(tl.int64)
            wp = w_packed_ptr + e * (2 * inter) * (hidden // 4)
            ws = w_scale_ptr + e * (2 * inter) * (hidden // 32)
            for k0 in range(0, hidden, BLOCK_K):
                cols = k0 + tl.arange(0, BLOCK_K)
                a = tl.load(x_ptr + tokens[:, None] * hidden + cols[None, :],
                            mask=live[:, None] & (cols[None, :] < hidden), other=0.0)
                if ON_INPUT:
                    a = (a.to(tl.float32) * wts[:, None]).to(x_ptr.dtype.element_ty)
                wg = _w2_tile_t(wp, ws, rows, row_ok, cols, hidden, SCALE_OFFSET)
                wu = _w2_tile_t(wp, ws, rows + inter, row_ok, cols, hidden, SCALE_OFFSET)
                acc_g = tl.dot(a, wg.to(a.dtype), acc_g)
                acc_u = tl.dot(a, wu.to(a.dtype), acc_u)
        if HAS_LIMIT:
            acc_g = tl.minimum(acc_g, limit)
            acc_u = tl.minimum(tl.maximum(acc_u, -limit), limit)
        act = acc_g / (1.0 + tl.exp(-acc_g)) * acc_u
        out = act_ptr + pairs[:, None].to(tl.int64) * inter + rows[None, :]
        tl.store(out, act.to(act_ptr.dtype.element_ty), mask=live[:, None] & row_ok[None, :])

    @triton.jit
    def _down_kernel(
        act_ptr, wts_ptr, ids_ptr, sorted_ptr, block_expert_ptr, num_padded_ptr,
        w_packed_ptr, w_scale_ptr, slot_ptr, f_packed_ptr, f_scale_ptr, f_global_ptr,
        y_ptr, n_pairs, hidden, inter,
        ALIGNED: tl.constexpr, ON_INPUT: tl.constexpr, HAS_POOL: tl.constexpr,
        SCALE_OFFSET: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    ):
        # Which pairs this program serves (inlined in both kernels: a nested jit call costs
        # the interpreter ~10 ms per program, and most decode programs exit right here).
        pid_m = tl.program_id(0)
        if ALIGNED:
            pairs = tl.load(sorted_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
            live = pairs < n_pairs
            if pid_m * BLOCK_M >= tl.load(num_padded_ptr):
                return
            expert = tl.load(block_expert_ptr + pid_m)
        else:  # all pairs in one tile; the first pair of each expert's program serves them
            pairs = tl.arange(0, BLOCK_M)
            ids = tl.load(ids_ptr + pairs, mask=pairs < n_pairs, other=-1).to(tl.int32)
            expert = tl.load(ids_ptr + pid_m).to(tl.int32)
            if tl.min(tl.where(ids == expert, pairs, BLOCK_M), 0) != pid_m:
                return
            live = ids == expert
        rows = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        row_ok = rows < hidden
        p64 = pairs.to(tl.int64)
        slot = -1
        if HAS_POOL:
            slot = tl.load(slot_ptr + expert)
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        if slot >= 0:
            s = slot.to(tl.int64)
            fp = f_packed_ptr + s * hidden * (inter // 2)
            fs = f_scale_ptr + s * hidden * (inter // 16)
            for k0 in range(0, inter, BLOCK_K):
                cols = k0 + tl.arange(0, BLOCK_K)
                a = tl.load(act_ptr + p64[:, None] * inter + cols[None, :],
                            mask=live[:, None] & (cols[None, :] < inter), other=0.0)
                w = _fp4_tile_t(fp, fs, rows, row_ok, cols, inter)
                acc = tl.dot(a, w.to(a.dtype), acc)
            acc = acc * tl.load(f_global_ptr + s)
        else:
            e = expert.to(tl.int64)
            wp = w_packed_ptr + e * hidden * (inter // 4)
            ws = w_scale_ptr + e * hidden * (inter // 32)
            for k0 in range(0, inter, BLOCK_K):
                cols = k0 + tl.arange(0, BLOCK_K)
                a = tl.load(act_ptr + p64[:, None] * inter + cols[None, :],
                            mask=live[:, None] & (cols[None, :] < inter), other=0.0)
                w = _w2_tile_t(wp, ws, rows, row_ok, cols, inter, SCALE_OFFSET)
                acc = tl.dot(a, w.to(a.dtype), acc)
        if not ON_INPUT:
            acc = acc * tl.load(wts_ptr + pairs, mask=live, other=0.0).to(tl.float32)[:, None]
        out = y_ptr + p64[:, None] * hidden + rows[None, :]
        tl.store(out, acc.to(y_ptr.dtype.element_ty), mask=live[:, None] & row_ok[None, :])

    @triton.jit
    def _sum_kernel(y_ptr, out_ptr, hidden, TOP_K: tl.constexpr, BLOCK: tl.constexpr):
        t = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        ok = cols < hidden
        acc = tl.load(y_ptr + t * TOP_K * hidden + cols, mask=ok, other=0.0).to(tl.float32)
        for k in tl.static_range(1, TOP_K):
            acc += tl.load(y_ptr + (t * TOP_K + k) * hidden + cols, mask=ok,
                           other=0.0).to(tl.float32)
        tl.store(out_ptr + t * hidden + cols, acc.to(out_ptr.dtype.element_ty), mask=ok)


def kernels_launchable(device: torch.device) -> bool:
    """Whether the Triton kernels (compiled, or interpreted) can run on ``device``."""
    return HAVE_TRITON and launchable(_gate_up_kernel, device)


def w2_fused_moe(
    x: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    w: MoEWeights,
    swiglu_limit: float | None = None,
    weight_on_input: bool = False,
    expert_tokens: torch.Tensor | None = None,
    config: TileConfig | None = None,
) -> torch.Tensor:
    """The routed experts' output ``[T, H]`` for ``x [T, H]`` (``kernels.w2_moe_layout``).

    ``expert_tokens`` (int64 ``[E]``), if given, grows by each expert's routed pairs. Nothing
    is read back by the host, and every shape depends on ``T`` and ``top_k`` only.
    """
    if x.dim() != 2 or x.shape[1] != w.hidden:
        raise ValueError(f"x must be [tokens, {w.hidden}], got {tuple(x.shape)}")
    if topk_ids.shape != topk_weights.shape or topk_ids.dim() != 2 or \
            topk_ids.shape[0] != x.shape[0]:
        raise ValueError(f"topk ids {tuple(topk_ids.shape)} and weights "
                         f"{tuple(topk_weights.shape)} must both be [{x.shape[0]}, top_k]")
    if not kernels_launchable(x.device):
        return w2_moe_reference(x, topk_weights, topk_ids, w, swiglu_limit, weight_on_input,
                                expert_tokens)
    t, top_k = int(topk_ids.shape[0]), int(topk_ids.shape[1])
    n = t * top_k
    hidden, inter = w.hidden, w.inter
    cfg = config or tile_config(n)
    if not cfg.aligned and cfg.block_m < n:
        raise ValueError(f"the decode path needs block_m >= {n} pairs, got {cfg.block_m}")
    x = x.contiguous()
    ids = topk_ids.contiguous().reshape(-1)
    wts = topk_weights.contiguous().reshape(-1)
    if cfg.aligned:
        sorted_ids, block_expert, num_padded = moe_align(topk_ids, w.num_experts, cfg.block_m)
        grid_m = int(block_expert.shape[0])
    else:
        sorted_ids = block_expert = num_padded = ids  # unused by the decode path
        grid_m = n
    pool = w.slots > 0
    f13 = (w.w13_fp4, w.w13_fp4_scale.view(torch.uint8), w.w13_fp4_global) if pool else \
        (w.w13_packed, w.w13_scale, w.w13_fp4_global)  # placeholders, never read
    f2 = (w.w2_fp4, w.w2_fp4_scale.view(torch.uint8), w.w2_fp4_global) if pool else \
        (w.w2_packed, w.w2_scale, w.w2_fp4_global)
    counts = expert_tokens if expert_tokens is not None else w.expert_slot
    act = torch.empty(n, inter, dtype=x.dtype, device=x.device)
    y = torch.empty(n, hidden, dtype=x.dtype, device=x.device)
    out = torch.empty(t, hidden, dtype=x.dtype, device=x.device)
    common = dict(ALIGNED=cfg.aligned, ON_INPUT=weight_on_input, HAS_POOL=pool,
                  SCALE_OFFSET=SCALE_FP32_OFFSET, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                  BLOCK_K=cfg.block_k)
    _gate_up_kernel[(grid_m, triton.cdiv(inter, cfg.block_n))](
        x, wts, ids, sorted_ids, block_expert, num_padded,
        w.w13_packed, w.w13_scale, w.expert_slot, *f13,
        act, counts, n, hidden, inter, float(swiglu_limit or 0.0),
        TOP_K=top_k, HAS_LIMIT=swiglu_limit is not None, COUNT=expert_tokens is not None,
        **common)
    _down_kernel[(grid_m, triton.cdiv(hidden, cfg.block_n))](
        act, wts, ids, sorted_ids, block_expert, num_padded,
        w.w2_packed, w.w2_scale, w.expert_slot, *f2,
        y, n, hidden, inter, **common)
    block = min(1024, triton_next_pow2(hidden))
    _sum_kernel[(t, triton.cdiv(hidden, block))](y, out, hidden, TOP_K=top_k, BLOCK=block)
    return out
