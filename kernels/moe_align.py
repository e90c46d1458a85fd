"""Routing alignment for the fused MoE, on the device: vLLM's ``moe_align_block_size`` contract.

The (token, k) pairs of a batch are sorted by expert and each expert's run is padded to a
multiple of ``block_m``, so one kernel program takes one block of pairs that all go to one
expert. Outputs (static shapes: they depend on the pair count, never on the routing):

* ``sorted_ids`` int32 ``[max_padded(n, E, block_m)]``: pair indices (``token * top_k + k``)
  grouped by expert, stable within an expert; padding entries hold ``n`` (no pair);
* ``block_expert`` int32 ``[max_padded / block_m]``: the expert of each block, -1 past the end;
* ``num_padded`` int32 ``[1]``: the used length of ``sorted_ids`` (programs past it exit).

Only tensor ops with routing-independent output shapes (sort, cumsum, scatter,
searchsorted): nothing is read back by the host, so this runs inside a CUDA graph.
"""

from __future__ import annotations

import torch

__all__ = ["max_padded", "moe_align"]


def max_padded(n_pairs: int, num_experts: int, block_m: int) -> int:
    """Upper bound of the padded length: every non-empty expert wastes under one block."""
    busy = min(n_pairs, num_experts)
    return max(block_m, -(-(n_pairs + busy * (block_m - 1)) // block_m) * block_m)


def moe_align(
    topk_ids: torch.Tensor, num_experts: int, block_m: int, skip_unmapped: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(sorted_ids, block_expert, num_padded)`` for ``topk_ids [T, top_k]``; see module doc.

    ``skip_unmapped`` (expert parallelism): ids of -1 (another rank's experts) are sorted into
    a bucket after the last expert, past ``num_padded``, so no program serves them.
    """
    dev = topk_ids.device
    flat = topk_ids.reshape(-1).to(torch.int64)
    n = int(flat.numel())
    buckets = num_experts + 1 if skip_unmapped else num_experts
    if skip_unmapped:
        flat = torch.where(flat < 0, num_experts, flat)
    total = max_padded(n, buckets, block_m)
    counts = torch.zeros(buckets, dtype=torch.int64, device=dev)
    counts.scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_m - 1) // block_m * block_m
    pad_end = torch.cumsum(padded, 0)
    pad_start = pad_end - padded
    run_start = torch.cumsum(counts, 0) - counts
    order = torch.argsort(flat, stable=True)
    expert_of = flat[order]
    rank = torch.arange(n, device=dev) - run_start[expert_of]
    sorted_ids = torch.full((total,), n, dtype=torch.int32, device=dev)
    sorted_ids.scatter_(0, pad_start[expert_of] + rank, order.to(torch.int32))
    block_first = torch.arange(0, total, block_m, device=dev)
    block_expert = torch.searchsorted(pad_end, block_first, right=True)
    block_expert = torch.where(block_expert < num_experts, block_expert, -1).to(torch.int32)
    num_padded = pad_end[num_experts - 1 : num_experts].to(torch.int32)
    return sorted_ids, block_expert, num_padded
