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


def check_shape(loaded: torch.Tensor, want: tuple[int, int], weight_name: str,
                expert_id: int) -> torch.Tensor:
    """A ``_shape`` tensor must say ``want``; returns it as int64 for the shape parameter."""
    got = tuple(int(d) for d in loaded.reshape(-1).tolist())
    if got != want:
        raise ValueError(f"{weight_name}: expert {expert_id} is {got}, the model expects {want}")
    return torch.tensor(want, dtype=torch.int64)


def copy_rows(target: torch.Tensor, loaded: torch.Tensor, shard: int, inter: int,
              weight_name: str, expert_id: int) -> None:
    """Copy ``loaded`` into this expert's slice of ``target`` (gate or up rows of w13)."""
    if shard < 2:
        target = target[shard * inter : (shard + 1) * inter]
    if tuple(loaded.shape) != tuple(target.shape):
        raise ValueError(f"{weight_name}: expert {expert_id} has shape {tuple(loaded.shape)}, "
                         f"expected {tuple(target.shape)}")
    target.copy_(loaded)
