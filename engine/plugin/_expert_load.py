"""Placing one expert's checkpoint tensor into a MoE layer's stacked parameter.

vLLM's expert mapping hands a quantized expert tensor to a parameter's loader one expert and
one shard at a time: ``w1`` (gate) and ``w3`` (up) share the stacked ``w13`` rows, gate first;
``w2`` is the down projection. These helpers check what arrived against what the model
expects and name the tensor when it does not fit.
"""

from __future__ import annotations

import torch

SHARDS = {"w1": 0, "w3": 1, "w2": 2}
"""vLLM's shard ids: 0 gate, 1 up (both in w13), 2 down (w2)."""

PROJ_NAMES = ("gate_proj", "up_proj", "down_proj")


def matrix_shape(shard: int, inter: int, hidden: int) -> tuple[int, int]:
    """``(out, in)`` of one expert matrix: gate/up ``(I, H)``, down ``(H, I)``."""
    return (hidden, inter) if shard == 2 else (inter, hidden)


def check_shape(
    loaded: torch.Tensor, want: tuple[int, int], weight_name: str, expert_id: int
) -> torch.Tensor:
    """A ``_shape`` tensor must say ``want``; returns it as int64 for the shape parameter."""
    got = tuple(int(d) for d in loaded.reshape(-1).tolist())
    if got != want:
        raise ValueError(f"{weight_name}: expert {expert_id} is {got}, the model expects {want}")
    return torch.tensor(want, dtype=torch.int64)


def copy_rows(
    target: torch.Tensor,
    loaded: torch.Tensor,
    shard: int,
    inter: int,
    weight_name: str,
    expert_id: int,
    tp: tuple[int, int] = (0, 1),
) -> None:
    """Copy ``loaded`` into this expert's slice of ``target`` (gate or up rows of w13).

    Tensor parallelism ``tp = (rank, size)``: ``inter`` is this rank's share of the expert
    width and ``loaded`` the whole checkpoint tensor, narrowed here to the rank's part of the
    intermediate dimension: gate/up rows ``[r*I/tp, (r+1)*I/tp)``, down columns the same
    range in that tensor's unit (a byte holds 4 W2 codes or 2 FP4 codes; a scale covers 32
    W2 or 16 FP4 weights). Whole groups split as long as ``I/tp`` is a multiple of 32, which
    the method checks, so every rank's scales belong to its own codes only.
    """
    if shard < 2:
        target = target[shard * inter : (shard + 1) * inter]
    rank, size = tp
    if size > 1:
        dim = 0 if shard < 2 else 1
        part = int(target.shape[dim])
        if loaded.dim() != target.dim() or int(loaded.shape[dim]) != part * size:
            raise ValueError(
                f"{weight_name}: expert {expert_id} has shape {tuple(loaded.shape)}; at tensor "
                f"parallel size {size} its dimension {dim} must be {size} x {part}"
            )
        loaded = loaded.narrow(dim, rank * part, part)
    if tuple(loaded.shape) != tuple(target.shape):
        raise ValueError(
            f"{weight_name}: expert {expert_id} has shape {tuple(loaded.shape)}, "
            f"expected {tuple(target.shape)}"
        )
    target.copy_(loaded)
