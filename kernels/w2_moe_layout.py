"""What the fused W2 MoE computes, defined once: its weights and a PyTorch reference.

A layer's routed experts are W2 codes (``kernels.w2_layout``) for every expert, and NVFP4
copies (``kernels.nvfp4_layout``) in fixed pool slots for some; ``expert_slot[e]`` is the slot
serving expert ``e`` or -1. For each (token ``t``, choice ``k``) with expert ``e`` and router
weight ``w``::

    g, u = x[t] @ W13[e][:I].T, x[t] @ W13[e][I:].T         (from FP4 if e has a slot)
    g, u = min(g, L), clamp(u, -L, L)                          (SwiGLU limit L, if any)
    a    = silu(g) * u                                         (rounded to x's dtype)
    y    = w * (a @ W2[e].T)                                   (rounded to x's dtype)
    out[t] = sum over k of y, in order k = 0, 1, ...           (float32, then x's dtype)

With the router weight on the input, ``x[t]`` is multiplied by ``w`` first and ``y`` is not.
``expert_tokens[e]`` (int64) grows by the pairs routed to ``e``. Under expert parallelism an
id of -1 is another rank's expert: its pair adds nothing here and is not counted, so the
output is this rank's partial sum. The reference computes this
with tensor ops whose shapes depend only on the batch's shape: no value is read by the host,
so it is CUDA-graph-safe and is what a CPU engine runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from kernels.nvfp4_layout import BLOCK as FP4_BLOCK
from kernels.nvfp4_layout import decode_nibbles_reference
from kernels.w2_layout import CODES_PER_BYTE, GROUP, w2_dequant_reference

__all__ = ["MoEWeights", "dequant_experts_reference", "w2_moe_reference"]


@dataclass(frozen=True)
class MoEWeights:
    """One layer's routed experts (see the module docstring); ``S`` may be 0."""

    w13_packed: torch.Tensor  # uint8 [E, 2I, H/4]
    w13_scale: torch.Tensor  # uint8 ue5m3 [E, 2I, H/32]
    w2_packed: torch.Tensor  # uint8 [E, H, I/4]
    w2_scale: torch.Tensor  # uint8 ue5m3 [E, H, I/32]
    expert_slot: torch.Tensor  # int32 [E]
    w13_fp4: torch.Tensor  # uint8 [S, 2I, H/2]
    w13_fp4_scale: torch.Tensor  # float8_e4m3fn [S, 2I, H/16]
    w13_fp4_global: torch.Tensor  # float32 [S, 2]
    w2_fp4: torch.Tensor  # uint8 [S, H, I/2]
    w2_fp4_scale: torch.Tensor  # float8_e4m3fn [S, H, I/16]
    w2_fp4_global: torch.Tensor  # float32 [S, 1]

    @property
    def num_experts(self) -> int:
        return int(self.w13_packed.shape[0])

    @property
    def inter(self) -> int:
        return int(self.w13_packed.shape[1]) // 2

    @property
    def hidden(self) -> int:
        return int(self.w2_packed.shape[1])

    @property
    def slots(self) -> int:
        return int(self.w13_fp4.shape[0])

    def check(self) -> None:
        """Raise ValueError naming the first tensor whose shape or dtype does not fit."""
        e, i, h, s = self.num_experts, self.inter, self.hidden, self.slots
        want: dict[str, tuple[tuple[int, ...], torch.dtype]] = {
            "w13_packed": ((e, 2 * i, h // CODES_PER_BYTE), torch.uint8),
            "w13_scale": ((e, 2 * i, h // GROUP), torch.uint8),
            "w2_packed": ((e, h, i // CODES_PER_BYTE), torch.uint8),
            "w2_scale": ((e, h, i // GROUP), torch.uint8),
            "expert_slot": ((e,), torch.int32),
            "w13_fp4": ((s, 2 * i, h // 2), torch.uint8),
            "w13_fp4_scale": ((s, 2 * i, h // FP4_BLOCK), torch.float8_e4m3fn),
            "w13_fp4_global": ((s, 2), torch.float32),
            "w2_fp4": ((s, h, i // 2), torch.uint8),
            "w2_fp4_scale": ((s, h, i // FP4_BLOCK), torch.float8_e4m3fn),
            "w2_fp4_global": ((s, 1), torch.float32),
        }
        if h % GROUP or i % GROUP:
            raise ValueError(f"hidden {h} and expert width {i} must be multiples of {GROUP}")
        for name, (shape, dtype) in want.items():
            t = getattr(self, name)
            if tuple(t.shape) != shape or t.dtype != dtype:
                raise ValueError(
                    f"MoE weights: {name} is {t.dtype} {tuple(t.shape)}, expected {dtype} {shape}"
                )


def _w2_all(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    e, rows, width = packed.shape
    cols = width * CODES_PER_BYTE
    flat = w2_dequant_reference(
        packed.reshape(e * rows, width), scales.reshape(e * rows, -1), cols, torch.float32
    )
    return flat.reshape(e, rows, cols)


def _fp4_all(packed: torch.Tensor, scales: torch.Tensor, row_global: torch.Tensor) -> torch.Tensor:
    s, rows, width = packed.shape
    codes = torch.stack((packed & 0xF, packed >> 4), dim=-1).reshape(s, rows, 2 * width)
    values = decode_nibbles_reference(codes).reshape(s, rows, -1, FP4_BLOCK)
    scale = scales.to(torch.float32).unsqueeze(-1) * row_global[:, :, None, None]
    return (values * scale).reshape(s, rows, 2 * width)


def dequant_experts_reference(w: MoEWeights) -> tuple[torch.Tensor, torch.Tensor]:
    """``(W13 [E, 2I, H], W2 [E, H, I])`` in float32 as served: FP4 where a slot serves."""
    w13, w2 = _w2_all(w.w13_packed, w.w13_scale), _w2_all(w.w2_packed, w.w2_scale)
    if w.slots == 0:
        return w13, w2
    i, h = w.inter, w.hidden
    g13 = w.w13_fp4_global[:, :, None].expand(w.slots, 2, i).reshape(w.slots, 2 * i)
    f13 = _fp4_all(w.w13_fp4, w.w13_fp4_scale, g13)
    f2 = _fp4_all(w.w2_fp4, w.w2_fp4_scale, w.w2_fp4_global.expand(w.slots, h))
    slot = w.expert_slot.to(torch.int64)
    pooled = (slot >= 0)[:, None, None]
    take = slot.clamp(min=0)
    return torch.where(pooled, f13[take], w13), torch.where(pooled, f2[take], w2)


def w2_moe_reference(
    x: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    w: MoEWeights,
    swiglu_limit: float | None = None,
    weight_on_input: bool = False,
    expert_tokens: torch.Tensor | None = None,
) -> torch.Tensor:
    """The module docstring's computation for ``x [T, H]``, ``topk_* [T, top_k]``."""
    t, top_k = int(topk_ids.shape[0]), int(topk_ids.shape[1])
    i = w.inter
    local = topk_ids >= 0  # False: another rank's expert (expert parallelism)
    ids = topk_ids.to(torch.int64).clamp(min=0)
    wts = topk_weights.to(torch.float32)
    if expert_tokens is not None:
        flat = ids.reshape(-1)
        expert_tokens.index_add_(0, flat, local.reshape(-1).to(torch.int64))
    w13, w2 = dequant_experts_reference(w)
    xf = x.to(torch.float32)
    # Every expert on every token, then each pair's own: shapes fixed by T, E and top_k.
    gate_up = torch.einsum("th,eoh->teo", xf, w13)
    rows = torch.arange(t, device=x.device)[:, None]
    pair = gate_up[rows, ids]  # [T, top_k, 2I]
    if weight_on_input:
        pair = pair * wts[..., None]
    gate, up = pair[..., :i], pair[..., i:]
    if swiglu_limit is not None:
        gate = gate.clamp(max=swiglu_limit)
        up = up.clamp(-swiglu_limit, swiglu_limit)
    act = (F.silu(gate) * up).to(x.dtype).to(torch.float32)
    down = torch.einsum("tki,ehi->tkeh", act, w2)
    picked = torch.gather(down, 2, ids[:, :, None, None].expand(t, top_k, 1, w.hidden))
    y = picked.squeeze(2)
    if not weight_on_input:
        y = y * wts[..., None]
    y = torch.where(local[..., None], y.to(x.dtype).to(torch.float32), 0.0)
    out = y[:, 0]
    for k in range(1, top_k):  # fixed order, as the kernel sums
        out = out + y[:, k]
    return out.to(x.dtype)
