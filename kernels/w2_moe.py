# mypy: disable-error-code="no-untyped-def,untyped-decorator,attr-defined"
# (Triton kernel signatures are read by Triton; Python annotations there would change them.
# attr-defined: a kernel local that is a constant on one constexpr path is a tensor on the other.)
"""The fused W2 MoE: a layer's routed experts in three launches, FP4 pool slots inside them.

``w2_fused_moe`` is the one entry point (math and reference: ``kernels.w2_moe_layout``).
Modeled on vLLM's ``fused_moe_kernel_gptq_awq`` / ``moe_wna16``: one program per (group of
pairs routed to one expert, block of output rows), so each code byte and scale is loaded
once and applied to every token routed to that expert, with ``tl.dot`` on the dequantized
tile. Launches, all with grids fixed by the batch's shape (CUDA-graph-capturable):

1. gate+up: a block's gate rows interleaved with its up rows in one weight tile (one
   ``tl.dot``, split after), SwiGLU clamp, SiLU and multiply fused in the epilogue; writes
   the activation per pair. The first column block of each group also adds its pair count
   to ``expert_tokens[e]`` (an integer atomic: exact, order-free);
2. down: routed weight fused, writes one row per pair (no float atomics);
3. sum over top_k in fixed order k = 0, 1, ... (so a replay is bit-identical).

Which pairs a program takes, two ways behind the same tile code:

* **decode** (at most ``DECODE_MAX_PAIRS`` pairs): no alignment pass. The grid has one row
  of programs per pair; a program whose pair is not the first one routed to its expert exits
  at once, the others take every pair of that expert, packed into a ``block_m``-row tile by
  its rank among them (a cumsum): 16 rows serve a k=7 verify step's 8 tokens, where a tile
  over all 64 pairs would load and multiply 4x the activations. An expert with more pairs
  than ``block_m`` (only if a token repeats an expert) is served in further chunks;
* **prefill**: ``kernels.moe_align.moe_align`` sorts pairs by expert on the device (vLLM's
  ``moe_align_block_size`` contract) and each program takes one padded block of one expert;
  programs past the padded end exit.

Pooled experts: ``expert_slot[e] >= 0`` sends a program down the FP4 branch, which reads
that slot's NVFP4 nibbles and e4m3 scales (decoded with integer ops) instead of the W2 codes,
and applies the slot's global scale to the float32 accumulator. Nothing is dequantized to
memory; how the weight tiles are read and decoded: ``kernels.w2_moe_tiles``. Without a
usable Triton the PyTorch reference runs instead (what a CPU engine does).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels._triton import HAVE_TRITON, launchable, tl, triton
from kernels.moe_align import moe_align
from kernels.w2_layout import GROUP, SCALE_FP32_OFFSET
from kernels.w2_moe_layout import MoEWeights, w2_moe_reference
from kernels.w2_moe_tiles import _fp4_tile, _w2_tile  # noqa: F401 (used by the kernels)

__all__ = ["DECODE_MAX_PAIRS", "TileConfig", "kernels_launchable", "tile_config", "w2_fused_moe"]

#: Most (token, k) pairs served by the decode path (8 tokens x top-8: a k=7 verify step).
DECODE_MAX_PAIRS = 64


@dataclass(frozen=True)
class TileConfig:
    """Tile sizes of one call.

    ``block_m``: rows of the activation tile (decode: pairs of one expert, compacted; prefill:
    one aligned block of pairs). ``block_n``: weight rows per program in both kernels (gate+up:
    ``block_n / 2`` gate rows interleaved with as many up rows, so both kernels stream the same
    bytes per K step). ``block_k``: K per step; a launch uses the largest power of two up to
    it that divides its K. ``num_warps`` / ``num_stages``: Triton's launch options.
    """

    block_m: int
    block_n: int
    block_k: int
    aligned: bool
    num_warps: int = 4
    num_stages: int = 3


def tile_config(n_pairs: int, top_k: int = 1) -> TileConfig:
    """The tiles for ``n_pairs`` (token, expert) pairs at ``top_k`` experts per token.

    Chosen by compiling every launch at GLM-5.3-Flash shapes for sm_121 and sm_90 without a
    GPU (registers, spills, shared memory and the SASS of the K loop; ``docs/quant-format.md``):

    * decode (up to ``DECODE_MAX_PAIRS``): ``block_m`` = the most pairs one expert can get,
      one per token (a router's top-k are distinct; more still run, in extra chunks), at least
      16 for ``tl.dot``. 64 weight rows x ``BLOCK_K = 128``: 2 KiB of codes and 256 B of
      scales per step, one 128-bit ``cp.async`` of codes per thread at 4 warps; 4 stages keep
      3 steps (6.9 KB) in flight per program. No spill; 144-199 registers and 35-42 KB of
      shared memory, so 2 programs fit per SM on GB10 at 8 tokens. ``BLOCK_K = 256`` would
      double the registers of the dequantized tile;
    * prefill below 2,048 pairs: 16-pair blocks, the decode tile, 2 stages (ptxas holds this
      launch at 96 registers and spilled 8 bytes, outside the K loop, at 3 or 4 stages);
    * prefill from 2,048 pairs: 64-pair blocks by 128 rows on 8 warps (4 warps spill).

    Left to a GPU: ``num_stages`` (3 vs 4-6: bytes in flight against programs per SM),
    ``num_warps`` (4 vs 2 or 8), ``block_n`` (64 vs 128: programs per wave at 1 token, 512
    now, vs bytes per request) and the prefill tiles, whose speed is not bandwidth-bound.
    """
    if n_pairs <= DECODE_MAX_PAIRS:
        tokens = -(-n_pairs // max(1, top_k))
        return TileConfig(
            max(16, triton_next_pow2(min(n_pairs, tokens))),
            64,
            128,
            aligned=False,
            num_warps=4,
            num_stages=4,
        )
    if n_pairs < 2048:
        return TileConfig(16, 64, 128, aligned=True, num_warps=4, num_stages=2)
    return TileConfig(64, 128, 128, aligned=True, num_warps=8, num_stages=3)


def triton_next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def fit_block_k(block_k: int, k: int) -> int:
    """The largest power of two up to ``block_k`` dividing ``k`` (at least one scale group)."""
    fit = min(block_k, k & -k)
    if fit < GROUP:
        raise ValueError(f"K {k} must be a multiple of {GROUP}")
    return fit


if HAVE_TRITON:

    @triton.jit
    def _gate_up_kernel(
        x_ptr,
        wts_ptr,
        ids_ptr,
        sorted_ptr,
        block_expert_ptr,
        num_padded_ptr,
        w_packed_ptr,
        w_scale_ptr,
        slot_ptr,
        f_packed_ptr,
        f_scale_ptr,
        f_global_ptr,
        act_ptr,
        counts_ptr,
        n_pairs,
        hidden,
        inter,
        limit,
        TOP_K: tl.constexpr,
        ALIGNED: tl.constexpr,
        HAS_LIMIT: tl.constexpr,
        ON_INPUT: tl.constexpr,
        HAS_POOL: tl.constexpr,
        COUNT: tl.constexpr,
        SCALE_OFFSET: tl.constexpr,
        PAIRS: tl.constexpr,
        LOCAL_ONLY: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr,
    ):
        # Which pairs this program serves (inlined in both kernels: a nested jit call costs
        # the interpreter ~10 ms per program, and most decode programs exit right here).
        pid_m = tl.program_id(0)
        p = tl.arange(0, PAIRS)
        if ALIGNED:
            if pid_m * BLOCK_M >= tl.load(num_padded_ptr):
                return
            expert = tl.load(block_expert_ptr + pid_m)
            match = p < 0
            n_match = BLOCK_M
        else:  # the first pair of each expert's program serves all of that expert's pairs
            ids = tl.load(ids_ptr + p, mask=p < n_pairs, other=-1).to(tl.int32)
            expert = tl.load(ids_ptr + pid_m).to(tl.int32)
            if LOCAL_ONLY:  # another rank's expert (-1): that rank adds its output
                if expert < 0:
                    return
            match = ids == expert
            if tl.min(tl.where(match, p, PAIRS), 0) != pid_m:
                return
            n_match = tl.sum(match.to(tl.int32), 0)
        rank = tl.cumsum(match.to(tl.int32), 0) - 1
        pid_n = tl.program_id(1)
        HALF: tl.constexpr = BLOCK_N // 2
        i = tl.arange(0, BLOCK_N)  # gate row, up row, gate row, ... (split after the dot)
        rows = pid_n * HALF + i // 2 + (i % 2) * inter
        row_ok = pid_n * HALF + i // 2 < inter
        cols_n = pid_n * HALF + tl.arange(0, HALF)
        slot = -1
        if HAS_POOL:
            slot = tl.load(slot_ptr + expert)
        for first in range(0, n_match, BLOCK_M):  # one chunk unless an expert has > BLOCK_M
            m = first + tl.arange(0, BLOCK_M)
            if ALIGNED:
                pairs = tl.load(sorted_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
                live = pairs < n_pairs
            else:
                sel = match[None, :] & (rank[None, :] == m[:, None])
                pairs = tl.sum(tl.where(sel, p[None, :], 0), 1)
                live = m < n_match
            if COUNT:
                if pid_n == 0:
                    tl.atomic_add(counts_ptr + expert, tl.sum(live.to(tl.int64), 0))
            x_rows = x_ptr + (pairs // TOP_K).to(tl.int64)[:, None] * hidden
            if ON_INPUT:
                wts = tl.load(wts_ptr + pairs, mask=live, other=0.0).to(tl.float32)
            acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            if slot >= 0:
                s = slot.to(tl.int64)
                fp = f_packed_ptr + s * (2 * inter) * (hidden // 2)
                fs = f_scale_ptr + s * (2 * inter) * (hidden // 16)
                for k0 in range(0, hidden, BLOCK_K):
                    a = tl.load(
                        x_rows + k0 + tl.arange(0, BLOCK_K)[None, :], mask=live[:, None], other=0.0
                    )
                    if ON_INPUT:
                        a = (a.to(tl.float32) * wts[:, None]).to(x_ptr.dtype.element_ty)
                    w = _fp4_tile(fp, fs, rows, row_ok, k0, hidden, BLOCK_K)
                    acc = tl.dot(a, tl.trans(w.to(a.dtype)), acc)
                acc_g, acc_u = tl.split(tl.reshape(acc, [BLOCK_M, HALF, 2]))
                acc_g = acc_g * tl.load(f_global_ptr + 2 * s)
                acc_u = acc_u * tl.load(f_global_ptr + 2 * s + 1)
            else:
                e = expert.to(tl.int64)
                wp = w_packed_ptr + e * (2 * inter) * (hidden // 4)
                ws = w_scale_ptr + e * (2 * inter) * (hidden // 32)
                for k0 in range(0, hidden, BLOCK_K):
                    a = tl.load(
                        x_rows + k0 + tl.arange(0, BLOCK_K)[None, :], mask=live[:, None], other=0.0
                    )
                    if ON_INPUT:
                        a = (a.to(tl.float32) * wts[:, None]).to(x_ptr.dtype.element_ty)
                    w = _w2_tile(wp, ws, rows, row_ok, k0, hidden, SCALE_OFFSET, BLOCK_K)
                    acc = tl.dot(a, tl.trans(w.to(a.dtype)), acc)
                acc_g, acc_u = tl.split(tl.reshape(acc, [BLOCK_M, HALF, 2]))
            if HAS_LIMIT:
                acc_g = tl.minimum(acc_g, limit)
                acc_u = tl.minimum(tl.maximum(acc_u, -limit), limit)
            act = acc_g / (1.0 + tl.exp(-acc_g)) * acc_u
            out = act_ptr + pairs[:, None].to(tl.int64) * inter + cols_n[None, :]
            tl.store(
                out,
                act.to(act_ptr.dtype.element_ty),
                mask=live[:, None] & (cols_n < inter)[None, :],
            )

    @triton.jit
    def _down_kernel(
        act_ptr,
        wts_ptr,
        ids_ptr,
        sorted_ptr,
        block_expert_ptr,
        num_padded_ptr,
        w_packed_ptr,
        w_scale_ptr,
        slot_ptr,
        f_packed_ptr,
        f_scale_ptr,
        f_global_ptr,
        y_ptr,
        n_pairs,
        hidden,
        inter,
        ALIGNED: tl.constexpr,
        ON_INPUT: tl.constexpr,
        HAS_POOL: tl.constexpr,
        SCALE_OFFSET: tl.constexpr,
        PAIRS: tl.constexpr,
        LOCAL_ONLY: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr,
    ):
        # Which pairs this program serves: as in _gate_up_kernel.
        pid_m = tl.program_id(0)
        p = tl.arange(0, PAIRS)
        if ALIGNED:
            if pid_m * BLOCK_M >= tl.load(num_padded_ptr):
                return
            expert = tl.load(block_expert_ptr + pid_m)
            match = p < 0
            n_match = BLOCK_M
        else:
            ids = tl.load(ids_ptr + p, mask=p < n_pairs, other=-1).to(tl.int32)
            expert = tl.load(ids_ptr + pid_m).to(tl.int32)
            if LOCAL_ONLY:  # another rank's expert (-1): that rank adds its output
                if expert < 0:
                    return
            match = ids == expert
            if tl.min(tl.where(match, p, PAIRS), 0) != pid_m:
                return
            n_match = tl.sum(match.to(tl.int32), 0)
        rank = tl.cumsum(match.to(tl.int32), 0) - 1
        rows = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        row_ok = rows < hidden
        slot = -1
        if HAS_POOL:
            slot = tl.load(slot_ptr + expert)
        for first in range(0, n_match, BLOCK_M):
            m = first + tl.arange(0, BLOCK_M)
            if ALIGNED:
                pairs = tl.load(sorted_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
                live = pairs < n_pairs
            else:
                sel = match[None, :] & (rank[None, :] == m[:, None])
                pairs = tl.sum(tl.where(sel, p[None, :], 0), 1)
                live = m < n_match
            p64 = pairs.to(tl.int64)
            a_rows = act_ptr + p64[:, None] * inter
            acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            if slot >= 0:
                s = slot.to(tl.int64)
                fp = f_packed_ptr + s * hidden * (inter // 2)
                fs = f_scale_ptr + s * hidden * (inter // 16)
                for k0 in range(0, inter, BLOCK_K):
                    a = tl.load(
                        a_rows + k0 + tl.arange(0, BLOCK_K)[None, :], mask=live[:, None], other=0.0
                    )
                    w = _fp4_tile(fp, fs, rows, row_ok, k0, inter, BLOCK_K)
                    acc = tl.dot(a, tl.trans(w.to(a.dtype)), acc)
                acc = acc * tl.load(f_global_ptr + s)
            else:
                e = expert.to(tl.int64)
                wp = w_packed_ptr + e * hidden * (inter // 4)
                ws = w_scale_ptr + e * hidden * (inter // 32)
                for k0 in range(0, inter, BLOCK_K):
                    a = tl.load(
                        a_rows + k0 + tl.arange(0, BLOCK_K)[None, :], mask=live[:, None], other=0.0
                    )
                    w = _w2_tile(wp, ws, rows, row_ok, k0, inter, SCALE_OFFSET, BLOCK_K)
                    acc = tl.dot(a, tl.trans(w.to(a.dtype)), acc)
            if not ON_INPUT:
                acc = acc * tl.load(wts_ptr + pairs, mask=live, other=0.0).to(tl.float32)[:, None]
            out = y_ptr + p64[:, None] * hidden + rows[None, :]
            tl.store(out, acc.to(y_ptr.dtype.element_ty), mask=live[:, None] & row_ok[None, :])

    @triton.jit
    def _sum_kernel(
        y_ptr,
        ids_ptr,
        out_ptr,
        hidden,
        TOP_K: tl.constexpr,
        LOCAL_ONLY: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        t = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        ok = cols < hidden
        take = ok
        if LOCAL_ONLY:  # a pair routed to another rank's expert has no row here: it adds 0
            take = ok & (tl.full([BLOCK], 0, tl.int32) + tl.load(ids_ptr + t * TOP_K) >= 0)
        acc = tl.load(y_ptr + t * TOP_K * hidden + cols, mask=take, other=0.0).to(tl.float32)
        for k in tl.static_range(1, TOP_K):
            take = ok
            if LOCAL_ONLY:
                take = ok & (tl.full([BLOCK], 0, tl.int32) + tl.load(ids_ptr + t * TOP_K + k) >= 0)
            acc += tl.load(y_ptr + (t * TOP_K + k) * hidden + cols, mask=take, other=0.0).to(
                tl.float32
            )
        tl.store(out_ptr + t * hidden + cols, acc.to(out_ptr.dtype.element_ty), mask=ok)


def kernels_launchable(device: torch.device) -> bool:
    """Whether the Triton kernels (compiled, or interpreted) can run on ``device``."""
    return HAVE_TRITON and launchable(_gate_up_kernel, device)


def _check_storage(w: MoEWeights) -> None:
    """The kernels index the weights as dense rows and read W2 scales as 32-bit words."""
    for name in w.__dataclass_fields__:
        t = getattr(w, name)
        if t.numel() and not t.is_contiguous():
            raise ValueError(f"MoE weights: {name} must be contiguous")
    for name in ("w13_scale", "w2_scale"):
        if getattr(w, name).data_ptr() % 4:
            raise ValueError(f"MoE weights: {name} must start on a 4-byte boundary")


def w2_fused_moe(
    x: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    w: MoEWeights,
    swiglu_limit: float | None = None,
    weight_on_input: bool = False,
    expert_tokens: torch.Tensor | None = None,
    config: TileConfig | None = None,
    expert_map: torch.Tensor | None = None,
) -> torch.Tensor:
    """The routed experts' output ``[T, H]`` for ``x [T, H]`` (``kernels.w2_moe_layout``).

    ``expert_tokens`` (int64 ``[E]``), if given, grows by each expert's routed pairs. Nothing
    is read back by the host, and every shape depends on ``T`` and ``top_k`` only.

    Expert parallelism: ``topk_ids`` are then global ids and ``expert_map`` (int32
    ``[global E]``, vLLM's) gives each one's local expert or -1; the output is this rank's
    partial sum (pairs on other ranks' experts add nothing), which vLLM all-reduces.
    """
    if x.dim() != 2 or x.shape[1] != w.hidden:
        raise ValueError(f"x must be [tokens, {w.hidden}], got {tuple(x.shape)}")
    if (
        topk_ids.shape != topk_weights.shape
        or topk_ids.dim() != 2
        or topk_ids.shape[0] != x.shape[0]
    ):
        raise ValueError(
            f"topk ids {tuple(topk_ids.shape)} and weights "
            f"{tuple(topk_weights.shape)} must both be [{x.shape[0]}, top_k]"
        )
    if expert_map is not None:  # a device gather: global -> local id or -1, no host read
        topk_ids = expert_map[topk_ids.to(torch.int64)]
    if not kernels_launchable(x.device):
        return w2_moe_reference(
            x, topk_weights, topk_ids, w, swiglu_limit, weight_on_input, expert_tokens
        )
    _check_storage(w)
    t, top_k = int(topk_ids.shape[0]), int(topk_ids.shape[1])
    n = t * top_k
    hidden, inter = w.hidden, w.inter
    cfg = config or tile_config(n, top_k)
    bk_up, bk_down = fit_block_k(cfg.block_k, hidden), fit_block_k(cfg.block_k, inter)
    local_only = expert_map is not None
    x = x.contiguous()
    ids = topk_ids.contiguous().reshape(-1)
    wts = topk_weights.contiguous().reshape(-1)
    if cfg.aligned:
        sorted_ids, block_expert, num_padded = moe_align(
            topk_ids, w.num_experts, cfg.block_m, skip_unmapped=local_only
        )
        grid_m = int(block_expert.shape[0])
    else:
        sorted_ids = block_expert = num_padded = ids  # unused by the decode path
        grid_m = n
    pool = w.slots > 0
    f13 = (
        (w.w13_fp4, w.w13_fp4_scale.view(torch.uint8), w.w13_fp4_global)
        if pool
        else (w.w13_packed, w.w13_scale, w.w13_fp4_global)
    )  # placeholders, never read
    f2 = (
        (w.w2_fp4, w.w2_fp4_scale.view(torch.uint8), w.w2_fp4_global)
        if pool
        else (w.w2_packed, w.w2_scale, w.w2_fp4_global)
    )
    counts = expert_tokens if expert_tokens is not None else w.expert_slot
    act = torch.empty(n, inter, dtype=x.dtype, device=x.device)
    y = torch.empty(n, hidden, dtype=x.dtype, device=x.device)
    out = torch.empty(t, hidden, dtype=x.dtype, device=x.device)
    common = dict(
        ALIGNED=cfg.aligned,
        ON_INPUT=weight_on_input,
        HAS_POOL=pool,
        LOCAL_ONLY=local_only,
        SCALE_OFFSET=SCALE_FP32_OFFSET,
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        PAIRS=16 if cfg.aligned else max(16, triton_next_pow2(n)),
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    _gate_up_kernel[(grid_m, triton.cdiv(2 * inter, cfg.block_n))](
        x,
        wts,
        ids,
        sorted_ids,
        block_expert,
        num_padded,
        w.w13_packed,
        w.w13_scale,
        w.expert_slot,
        *f13,
        act,
        counts,
        n,
        hidden,
        inter,
        float(swiglu_limit or 0.0),
        TOP_K=top_k,
        HAS_LIMIT=swiglu_limit is not None,
        COUNT=expert_tokens is not None,
        BLOCK_K=bk_up,
        **common,
    )
    _down_kernel[(grid_m, triton.cdiv(hidden, cfg.block_n))](
        act,
        wts,
        ids,
        sorted_ids,
        block_expert,
        num_padded,
        w.w2_packed,
        w.w2_scale,
        w.expert_slot,
        *f2,
        y,
        n,
        hidden,
        inter,
        BLOCK_K=bk_down,
        **common,
    )
    block = min(1024, triton_next_pow2(hidden))
    _sum_kernel[(t, triton.cdiv(hidden, block))](
        y, ids, out, hidden, TOP_K=top_k, LOCAL_ONLY=local_only, BLOCK=block
    )
    return out
