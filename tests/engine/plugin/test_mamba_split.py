"""The replacement is vLLM's own split with only the grid changed.

Both functions are called on the same stub schedulers and requests over a
seeded random sweep of every input the method reads. vLLM's method run with
``cache_config.block_size`` set to the Mamba group's block must agree exactly
with the replacement, whatever ``cache_config.block_size`` and
``mamba_block_size`` the replacement sees.
"""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import torch
from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec

from engine.plugin._mamba_split import mamba_block_aligned_split


def _original() -> Any:
    from engine.plugin import scheduler_fix

    scheduler_fix.revert()
    from vllm.v1.core.sched.scheduler import Scheduler

    return Scheduler.__dict__["_mamba_block_aligned_split"]


def _groups(grid: int, rng: random.Random) -> list[SimpleNamespace]:
    mamba = MambaSpec(
        block_size=grid, shapes=((2, 2),), dtypes=(torch.float32,), mamba_cache_mode="align"
    )
    draft = FullAttentionSpec(
        block_size=rng.choice([16, 64]), num_kv_heads=1, head_size=32, dtype=torch.bfloat16
    )
    groups = [SimpleNamespace(kv_cache_spec=draft), SimpleNamespace(kv_cache_spec=mamba)]
    rng.shuffle(groups)
    return groups


def _case(rng: random.Random) -> tuple[SimpleNamespace, SimpleNamespace, tuple[int, int, int]]:
    grid = rng.choice([16, 64, 96, 128, 512, 1024, 7168])
    hash_block = rng.choice([d for d in (8, 16, 32, 64, 128, 1024) if grid % d == 0] or [grid])
    prompt = rng.randint(1, 6 * grid)
    outputs = rng.choice([0, 0, 1, rng.randint(0, 2 * grid)])
    computed = rng.randint(0, prompt + outputs)
    scheduler = SimpleNamespace(
        cache_config=SimpleNamespace(block_size=grid, mamba_block_size=grid),
        kv_cache_config=SimpleNamespace(kv_cache_groups=_groups(grid, rng)),
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
    clipped = 0
    for _ in range(20000):
        scheduler, request, args = _case(rng)
        want = original(scheduler, request, *args)
        got = mamba_block_aligned_split(scheduler, request, *args)
        clipped += want != args[0]
        if want != got:
            differences.append((vars(scheduler), vars(request), args, want, got))
    assert differences == []
    assert clipped > 5000  # the sweep exercises the clipping paths, not just pass-through


def test_only_the_mamba_groups_block_matters() -> None:
    original = _original()
    rng = random.Random(7)
    for _ in range(5000):
        scheduler, request, args = _case(rng)
        want = original(scheduler, request, *args)  # vLLM on the Mamba grid
        grid = scheduler.cache_config.block_size
        scheduler.cache_config.block_size = rng.choice([8, 16, 1024, 3 * grid])
        scheduler.cache_config.mamba_block_size = rng.choice([None, 16, grid, 2 * grid])
        assert mamba_block_aligned_split(scheduler, request, *args) == want


def test_without_a_mamba_group_it_is_vllms_split() -> None:
    original = _original()
    rng = random.Random(11)
    for _ in range(2000):
        scheduler, request, args = _case(rng)
        scheduler.kv_cache_config.kv_cache_groups = [
            g
            for g in scheduler.kv_cache_config.kv_cache_groups
            if not isinstance(g.kv_cache_spec, MambaSpec)
        ]
        scheduler.cache_config.block_size = rng.choice([16, 64, 128])
        assert mamba_block_aligned_split(scheduler, request, *args) == original(
            scheduler, request, *args
        )
