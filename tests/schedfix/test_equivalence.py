"""The replacement is vLLM's own split with only the grid changed.

Both functions are called on the same stub schedulers and requests over a
seeded random sweep of every input the method reads. With the Mamba grid equal
to ``cache_config.block_size`` they must agree exactly; with a different
``cache_config.block_size`` the replacement must ignore it.
"""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

from engine.plugin._mamba_split import mamba_block_aligned_split


def _original() -> Any:
    from engine.plugin import scheduler_fix

    scheduler_fix.revert()
    from vllm.v1.core.sched.scheduler import Scheduler

    return Scheduler.__dict__["_mamba_block_aligned_split"]


def _case(rng: random.Random) -> tuple[SimpleNamespace, SimpleNamespace, tuple[int, int, int]]:
    grid = rng.choice([16, 64, 96, 128, 512, 1024, 7168])
    hash_block = rng.choice([d for d in (8, 16, 32, 64, 128, 1024) if grid % d == 0] or [grid])
    prompt = rng.randint(1, 6 * grid)
    outputs = rng.choice([0, 0, 1, rng.randint(0, 2 * grid)])
    computed = rng.randint(0, prompt + outputs)
    scheduler = SimpleNamespace(
        cache_config=SimpleNamespace(block_size=grid, mamba_block_size=grid),
        block_size=rng.choice([grid, 2 * grid]),
        hash_block_size=hash_block,
        use_eagle_block_drop=rng.random() < 0.3,
        mamba_partial_cache_hit=rng.random() < 0.5,
        mamba_has_prefill_checkpoint_blocks=rng.random() < 0.4,
        mamba_prefill_checkpoint_alignment=rng.choice([None, 16, 64]),
        max_num_scheduled_tokens=rng.choice([64, 2048, 8192, 3 * grid]),
        scheduler_config=SimpleNamespace(long_prefill_token_threshold=rng.choice([0, 0, 512])),
        mamba_shared_prefix_checkpoint=rng.random() < 0.3,
    )
    request = SimpleNamespace(
        num_computed_tokens=computed,
        num_prompt_tokens=prompt,
        num_tokens=prompt + outputs,
        shared_prefix_boundary=rng.choice([0, rng.randint(0, prompt + outputs)]),
    )
    local = rng.choice([0, 0, rng.randint(0, grid)])
    external = rng.choice([0, 0, rng.randint(0, grid)])
    remaining = max(prompt + outputs - computed - local - external, 1)
    new = rng.randint(1, remaining)
    return scheduler, request, (new, local, external)


def test_identical_to_vllm_when_the_grids_agree() -> None:
    original = _original()
    rng = random.Random(20261130)
    differences = []
    for _ in range(20000):
        scheduler, request, args = _case(rng)
        want = original(scheduler, request, *args)
        got = mamba_block_aligned_split(scheduler, request, *args)
        if want != got:
            differences.append((vars(scheduler), vars(request), args, want, got))
    assert differences == []


def test_only_the_mamba_grid_matters() -> None:
    original = _original()
    rng = random.Random(7)
    for _ in range(5000):
        scheduler, request, args = _case(rng)
        grid = scheduler.cache_config.mamba_block_size
        want = original(scheduler, request, *args)  # vLLM on the Mamba grid
        scheduler.cache_config.block_size = rng.choice([8, 16, 1024, 3 * grid])
        assert mamba_block_aligned_split(scheduler, request, *args) == want


def test_falls_back_to_block_size_without_a_mamba_block_size() -> None:
    original = _original()
    rng = random.Random(11)
    for _ in range(2000):
        scheduler, request, args = _case(rng)
        scheduler.cache_config.mamba_block_size = None
        assert mamba_block_aligned_split(scheduler, request, *args) == original(
            scheduler, request, *args
        )
