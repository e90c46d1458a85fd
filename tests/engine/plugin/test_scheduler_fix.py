"""The scheduler fix, proven on vLLM's real Scheduler (no model, no worker).

KV cache shaped like GLM-5.3-Flash + DFlash2 on one Spark: KDA (Mamba, align
mode) block 7168, MLA block 7168, drafter block 1024, so the engine core's
``cache_config.block_size`` is 1024. Budgets are below one Mamba block (2048)
and above it (8192).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.hybrid import (
    DRAFT_BLOCK,
    MAMBA_BLOCK,
    HybridScheduler,
    build,
    crossed_boundaries,
    misplaced_states,
    off_grid_ends,
    prompt,
)

B = MAMBA_BLOCK


def tail(num_prompt_tokens: int, unit: int = DRAFT_BLOCK) -> int:
    """vLLM's prompt-tail checkpoint: (prompt - 1) floored to the hash grid."""
    return (num_prompt_tokens - 1) // unit * unit


def prefill_ends(h: HybridScheduler, request_id: str) -> list[int]:
    return [c.end for c in h.chunks[request_id] if c.is_prefill]


def serve(model_dir: Path, length: int, budget: int, **kw: object) -> HybridScheduler:
    h = build(model_dir, budget=budget, **kw)  # type: ignore[arg-type]
    h.add("r", prompt(1, length))
    h.run()
    return h


def test_the_harness_reproduces_the_engine_cores_block_sizes(model_dir: Path, fixed: None) -> None:
    s = build(model_dir, budget=2048).scheduler
    assert s.cache_config.block_size == DRAFT_BLOCK  # lowered by the drafter group
    assert s.cache_config.mamba_block_size == 16  # the engine core's stale copy
    assert s.block_size == B  # lcm of the group blocks
    assert s.need_mamba_block_aligned_split


# -- without the fix: the bug ---------------------------------------------------------------


def test_unfixed_budget_below_a_block_publishes_a_state_under_the_wrong_boundary(
    model_dir: Path, unfixed: None
) -> None:
    h = serve(model_dir, 30000, budget=2048)
    chunks = h.chunks["r"]
    # The drafter's 1024 grid lets a chunk run from 6144 past the 7168 boundary.
    assert (6144, 8192) in crossed_boundaries(chunks, B)
    # Slot 0 is complete holding the state after 6144 tokens, keyed as 7168.
    assert (7168, 6144) in misplaced_states(chunks, B)


def test_unfixed_budget_above_a_block_ends_chunks_off_the_mamba_grid(
    model_dir: Path, unfixed: None
) -> None:
    h = serve(model_dir, 30000, budget=8192)
    assert 8192 in off_grid_ends(h.chunks["r"], B, tail(30000))
    assert misplaced_states(h.chunks["r"], B)


def test_unfixed_a_later_hit_restores_a_state_from_another_position(
    model_dir: Path, unfixed: None
) -> None:
    h = serve(model_dir, 30000, budget=8192)
    # The state written at 8192 sat in slot 1 when the block 7168..14336 completed.
    assert (14336, 8192) in misplaced_states(h.chunks["r"], B)
    h.add("again", prompt(1, 15000) + [900] * 3000)
    h.run()
    assert h.hits["again"] == 14336  # the hit vLLM serves is that wrong state


# -- with the fix -----------------------------------------------------------------------------


@pytest.mark.parametrize("budget", [2048, 3000, 8192, 20000])
@pytest.mark.parametrize(
    "length",
    [5000, B, B + 1, 3 * B, 30000, 7 * B + 123],
    ids=["under-a-block", "one-block", "one-block-plus-one", "three-blocks", "30000", "many"],
)
def test_fixed_every_state_sits_on_its_boundary(
    model_dir: Path, fixed: None, budget: int, length: int
) -> None:
    h = serve(model_dir, length, budget=budget)
    chunks = h.chunks["r"]
    assert sum(c.end - c.start for c in chunks if c.is_prefill) >= length - 1
    assert misplaced_states(chunks, B) == []
    assert crossed_boundaries(chunks, B) == []
    ends = prefill_ends(h, "r")
    last_cacheable = (length - 1) // B * B
    if budget < 2 * B:
        # No step holds two blocks: every Mamba boundary up to the last
        # cacheable one is a chunk end, so each block's state is stored.
        on_grid = [e for e in ends if e % B == 0 and e <= last_cacheable]
        assert on_grid == [k * B for k in range(1, last_cacheable // B + 1)]
    if budget >= B:
        # A step holds a whole block: non-final chunk ends are on the Mamba grid
        # (or at vLLM's prompt-tail checkpoint on the hash grid).
        assert off_grid_ends(chunks, B, tail(length)) == []


def test_fixed_prompt_under_a_block_stops_only_at_its_tail_checkpoint(
    model_dir: Path, fixed: None
) -> None:
    # No Mamba boundary to reach; vLLM's hash-grid tail checkpoint stays.
    h = serve(model_dir, 5000, budget=8192)
    assert prefill_ends(h, "r") == [tail(5000), 5000] == [4096, 5000]


def test_fixed_exactly_one_block_is_not_split_on_the_mamba_grid(
    model_dir: Path, fixed: None
) -> None:
    # The last cacheable Mamba boundary of a 7168-token prompt is 0.
    h = serve(model_dir, B, budget=8192)
    assert prefill_ends(h, "r") == [tail(B), B] == [6144, 7168]


def test_fixed_budget_below_a_block_advances_inside_it_and_stops_on_the_boundary(
    model_dir: Path, fixed: None
) -> None:
    h = serve(model_dir, 30000, budget=2048)
    assert prefill_ends(h, "r")[:5] == [2048, 4096, 6144, 7168, 9216]


def test_fixed_prefix_cache_hit_lands_on_the_mamba_grid_and_continues_aligned(
    model_dir: Path, fixed: None
) -> None:
    h = serve(model_dir, 30000, budget=2048)
    h.add("turn2", prompt(1, 15000) + [900 + i % 50 for i in range(20000)])
    h.run()
    assert h.hits["turn2"] == 2 * B
    chunks = h.chunks["turn2"]
    assert chunks[0].start == 2 * B
    assert misplaced_states(chunks, B) == []
    assert 3 * B in prefill_ends(h, "turn2") and 4 * B in prefill_ends(h, "turn2")


def test_fixed_hit_at_the_earlier_prompts_tail_then_crosses_no_boundary_unaligned(
    model_dir: Path, fixed: None
) -> None:
    # vLLM also stores the prompt's hash-grid tail (29696); a follow-up turn
    # starts there, inside a Mamba block, and must stop at that block's end.
    h = serve(model_dir, 30000, budget=8192)
    h.add("turn2", prompt(1, 30000) + [900 + i % 50 for i in range(12000)])
    h.run()
    assert h.hits["turn2"] == tail(30000)
    chunks = h.chunks["turn2"]
    assert chunks[0].end == 5 * B  # 35840: the end of the block the hit is in
    assert misplaced_states(chunks, B) == []
    assert crossed_boundaries(chunks, B) == []


@pytest.mark.parametrize("budget", [2048, 8192])
def test_fixed_resumed_request_replays_its_output_on_the_grid(
    model_dir: Path, fixed: None, budget: int
) -> None:
    h = build(model_dir, budget=budget)
    h.add("r", prompt(3, 20000), max_tokens=40)
    for _ in range(25):
        h.step()
    request = h.scheduler.requests["r"]
    generated = request.num_output_tokens
    assert generated > 0
    # vLLM's own preemption path; the cache reset forces a full replay.
    assert h.scheduler.reset_prefix_cache(reset_running_requests=True)
    assert request.num_preemptions == 1
    h.run()
    chunks = h.chunks["r"]
    restart = next(i for i in range(1, len(chunks)) if chunks[i].start < chunks[i - 1].end)
    resumed = chunks[restart:]
    assert resumed[0].start == 0 and resumed[0].prefill_end > 20000  # output is replayed
    assert misplaced_states(resumed, B) == []
    assert crossed_boundaries(resumed, B) == []
    assert {B, 2 * B} <= {c.end for c in resumed}


def test_unfixed_resumed_request_replays_off_the_grid(model_dir: Path, unfixed: None) -> None:
    h = build(model_dir, budget=2048)
    h.add("r", prompt(3, 20000), max_tokens=40)
    for _ in range(25):
        h.step()
    h.scheduler.reset_prefix_cache(reset_running_requests=True)
    h.run()
    chunks = h.chunks["r"]
    restart = next(i for i in range(1, len(chunks)) if chunks[i].start < chunks[i - 1].end)
    assert (7168, 6144) in misplaced_states(chunks[restart:], B)


def test_fixed_even_when_the_engine_core_knows_the_right_mamba_block_size(
    model_dir: Path, fixed: None
) -> None:
    h = serve(model_dir, 30000, budget=2048, engine_core_mamba_block_size=B)
    assert misplaced_states(h.chunks["r"], B) == []


def test_fixed_full_attention_drafter_too(model_dir: Path, fixed: None) -> None:
    h = serve(model_dir, 30000, budget=2048, draft_kind="full")
    assert h.scheduler.cache_config.block_size == DRAFT_BLOCK
    assert misplaced_states(h.chunks["r"], B) == []


def test_fixed_changes_nothing_when_the_grids_agree(model_dir: Path, fixed: None) -> None:
    # No small drafter group: block_size == mamba_block_size, same chunks as vLLM.
    h = serve(model_dir, 30000, budget=2048, draft_block=B)
    from engine.plugin import scheduler_fix

    scheduler_fix.revert()
    g = serve(model_dir, 30000, budget=2048, draft_block=B)
    assert [(c.start, c.end) for c in h.chunks["r"]] == [(c.start, c.end) for c in g.chunks["r"]]


def test_fix_on_a_model_without_hybrid_layers_reports_inactive_and_schedules(
    model_dir: Path, fixed: None, capfd: pytest.CaptureFixture[str]
) -> None:
    h = serve(model_dir, 30000, budget=2048, with_mamba=False)
    assert not h.scheduler.need_mamba_block_aligned_split
    assert "[sparkcode-plugin] scheduler_fix: inactive (this engine has no Mamba" in (
        capfd.readouterr().err
    )
    assert prefill_ends(h, "r")[:3] == [2048, 4096, 6144]  # plain budget-sized chunks
