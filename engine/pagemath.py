"""Prefix-cache page math for hybrid (KDA / Mamba) models.

On a hybrid model vLLM can only reuse a cached prefix where a linear-attention
state was stored, and it stores one per Mamba block: prefix-cache hits come in
multiples of ``mamba_block_size`` tokens. A new turn therefore re-prefills
everything after the last block boundary it shares with an earlier prompt: up
to one whole block plus the turn's new tokens. For GLM-5.3-Flash on one DGX
Spark that block is 7168 tokens; at ~640 tokens/s of prefill that is up to
~11 s per turn before any new token, and the seed reports a roughly constant
~16 s of prefill per agent turn for this reason.

Where the block size comes from, best first: the running engine's log (vLLM's
own "Setting attention block size" line, or the scheduler_fix plugin's), the
model's ``config.json``, or built-in facts for known models when the model is
not downloaded yet.

With the ``turn_states`` plugin feature the engine also keeps the state at each
prompt's end, on a grid of :data:`engine.profiles.TURN_STATE_UNIT` tokens
(``--prefix-match-unit``): a turn that extends an earlier prompt then re-prefills
only what came after that prompt (the reply and the new message) plus under one
unit. Each kept state costs one Mamba page per KDA layer
(:meth:`HybridFacts.kept_state_bytes`), and the profile bounds how many are kept.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from engine.paths import Paths
from engine.profiles import (
    DEFAULT_KEPT_TURN_STATES,
    TURN_STATE_UNIT,
    Profile,
    is_hybrid_config,
    model_dir_for,
    read_model_config,
    text_config,
)

SEED_TURN_PREFILL_S = 16.0
"""Prefill per agent turn on one Spark reported by the seed (GLM-5.3-Flash + DFlash2)."""

EAGLE_LIKE = ("eagle", "eagle3", "mtp", "dflash", "dspark")
"""Drafters vLLM 0.32 treats as EAGLE (``SpeculativeConfig.use_eagle``): with them the
prompt-end state is kept one hash block before the end."""

_LOG_PATTERNS = (
    re.compile(r"Mamba block of (\d+) tokens"),  # engine.plugin.scheduler_fix
    re.compile(r"Setting attention block size to (\d+) tokens"),  # vLLM platform alignment
)


@dataclass(frozen=True)
class HybridFacts:
    """What the Mamba block of a KDA + MLA model follows from."""

    name: str
    kda_heads: int
    kda_head_dim: int
    conv_kernel: int
    attn_page_bytes_per_token: int
    """MLA KV cache bytes per token and layer (``fp8_ds_mla``: 656)."""
    block_alignment: int = 128
    """vLLM raises hybrid MLA blocks in multiples of 128 tokens."""
    recurrent_bytes: int = 4  # float32 recurrent state ("auto")
    conv_bytes: int = 2  # model dtype (bf16)
    prefill_tok_s: float | None = None
    """Measured prefill rate on the target machine, if known."""
    kda_layers: int = 34
    """KDA layers holding a state each (GLM-5.3-Flash: 45 layers less 11 MLA)."""

    def kept_state_bytes(self, num_speculative_tokens: int) -> int:
        """One kept state: a Mamba page (padded to its block's MLA page) per KDA layer.

        vLLM pads each Mamba page to the attention page of one Mamba block
        (``mamba_block_size`` x 656 B): 7168 x 656 = 4,702,208 B for GLM-5.3-Flash
        with DFlash2, so 34 layers hold 159,875,072 B (152.5 MiB) per kept state.
        """
        page = self.mamba_block_size(num_speculative_tokens) * self.attn_page_bytes_per_token
        return self.kda_layers * max(page, self.mamba_page_bytes(num_speculative_tokens))

    def mamba_page_bytes(self, num_speculative_tokens: int) -> int:
        """One layer's KDA state: recurrent H x D x D plus conv 3HD x (K - 1 + k)."""
        recurrent = self.kda_heads * self.kda_head_dim * self.kda_head_dim * self.recurrent_bytes
        conv_len = self.conv_kernel - 1 + num_speculative_tokens
        conv = 3 * self.kda_heads * self.kda_head_dim * conv_len * self.conv_bytes
        return recurrent + conv

    def mamba_block_size(self, num_speculative_tokens: int) -> int:
        """The smallest aligned attention block whose page holds one KDA state."""
        per_unit = self.block_alignment * self.attn_page_bytes_per_token
        units = -(-self.mamba_page_bytes(num_speculative_tokens) // per_unit)
        return self.block_alignment * units


GLM53_FLASH = HybridFacts(
    name="GLM-5.3-Flash",
    kda_heads=64,
    kda_head_dim=128,
    conv_kernel=4,
    attn_page_bytes_per_token=656,
    prefill_tok_s=640.0,
)
"""glm53-flash.md: linear_attn_config 64 x 128, short conv 4, fp8_ds_mla 656 B/token."""

_KNOWN_BY_NAME = {"glm-5.3-flash": GLM53_FLASH}


@dataclass(frozen=True)
class PageMath:
    """The prefix-cache granularity of one profile and what a cache miss costs."""

    profile: str
    mamba_block_size: int
    """Tokens per Mamba/KDA state block: prefix-cache hits are multiples of it."""
    source: str
    """Where the block size came from (engine log, config.json, built-in facts)."""
    prefill_tok_s: float | None = None
    model: str | None = None
    turn_state_unit: int | None = None
    """The ``turn_states`` feature's grid (None: off, hits only on Mamba blocks)."""
    kept_turn_states: int = 0
    """How many prompt-end states the feature keeps per Mamba group."""
    kept_state_bytes: int | None = None
    """Memory of one kept state, where the model's facts give it."""
    turn_state_slack: int | None = None
    """Seen tokens a turn still re-prefills at most beyond its new ones: one unit, or
    two with a drafter that reads the target's hidden states (EAGLE, MTP, DFlash):
    vLLM then keeps the state one hash block earlier (``use_eagle_block_drop``)."""

    def cached_tokens(self, shared_prefix_tokens: int, *, prompt_end: bool = False) -> int:
        """Tokens a new prompt can reuse when it shares this many with an earlier one.

        ``prompt_end``: the shared prefix is a whole earlier prompt whose state was
        kept (``turn_states``), so the hit floors to the feature's finer grid.
        """
        # vLLM keeps the last token to recompute; hits floor to the block grid.
        usable = max(shared_prefix_tokens - 1, 0)
        grid = self.mamba_block_size
        if prompt_end and self.turn_state_unit:
            grid = self.turn_state_unit
        return usable // grid * grid

    def prefill_seconds(self, tokens: int) -> float | None:
        """Prefill time for ``tokens`` un-cached tokens, if the rate is known."""
        if not self.prefill_tok_s:
            return None
        return tokens / self.prefill_tok_s

    @property
    def worst_tail_s(self) -> float | None:
        """Re-prefill of a whole block (the most a shared prefix can cost)."""
        return self.prefill_seconds(self.mamba_block_size)

    def summary(self) -> str:
        """One line for ``engine status`` and the engine panel."""
        block = self.mamba_block_size
        if self.turn_state_unit:
            return self._kept_summary()
        text = (
            f"hits land on multiples of {block} tokens (Mamba/KDA state block); "
            f"each turn re-prefills up to {block} already-seen tokens plus its new ones"
        )
        worst = self.worst_tail_s
        if worst is not None and self.prefill_tok_s:
            text += f" (up to {worst:.1f} s at ~{self.prefill_tok_s:.0f} tok/s"
            if self.model == GLM53_FLASH.name:
                text += f"; the seed reports ~{SEED_TURN_PREFILL_S:.0f} s of prefill per agent turn"
            text += ")"
        return text

    def _kept_summary(self) -> str:
        unit, block = self.turn_state_unit, self.mamba_block_size
        slack = self.turn_state_slack or unit
        text = (
            f"turn_states: each prompt's end state is kept ({unit}-token grid), so a turn "
            f"that extends the last prompt re-prefills its new tokens plus under {slack}; "
            f"other hits land on multiples of {block} tokens; at most "
            f"{self.kept_turn_states} kept states"
        )
        if self.kept_state_bytes is not None:
            each = self.kept_state_bytes / 2**20
            total = each * self.kept_turn_states / 1024
            text += f" of {each:.0f} MiB each ({total:.1f} GiB)"
        worst = self.worst_tail_s
        if worst is not None and self.prefill_tok_s:
            text += f"; without them a turn re-prefills up to {worst:.1f} s"
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "mamba_block_size": self.mamba_block_size,
            "source": self.source,
            "prefill_tok_s": self.prefill_tok_s,
            "worst_tail_s": self.worst_tail_s,
            "model": self.model,
            "turn_state_unit": self.turn_state_unit,
            "kept_turn_states": self.kept_turn_states,
            "kept_state_bytes": self.kept_state_bytes,
            "summary": self.summary(),
        }


def mamba_block_from_log(lines: Iterable[str]) -> int | None:
    """The Mamba block size a running engine reported, if any (last one wins)."""
    found: int | None = None
    for line in lines:
        for pattern in _LOG_PATTERNS:
            match = pattern.search(line)
            if match:
                found = int(match.group(1))
    return found


def _facts_from_config(config: dict[str, Any]) -> HybridFacts | None:
    """KDA facts from a GLM-5.3-Flash style config (others: not estimated)."""
    text = text_config(config)
    linear = text.get("linear_attn_config")
    if not isinstance(linear, dict) or not str(text.get("model_type", "")).startswith("glm5"):
        return None
    try:
        full = linear.get("full_attn_layers")
        layers = int(text.get("num_hidden_layers", 45))
        kda_layers = layers - len(full) if isinstance(full, list) else GLM53_FLASH.kda_layers
        return HybridFacts(
            name=GLM53_FLASH.name,
            kda_heads=int(linear["num_heads"]),
            kda_layers=kda_layers,
            kda_head_dim=int(linear["head_dim"]),
            conv_kernel=int(linear.get("short_conv_kernel_size", 4)),
            attn_page_bytes_per_token=GLM53_FLASH.attn_page_bytes_per_token,
            prefill_tok_s=GLM53_FLASH.prefill_tok_s,
        )
    except (KeyError, TypeError, ValueError):
        return None


def prefix_cache_math(
    profile: Profile, paths: Paths, log_lines: Iterable[str] | None = None
) -> PageMath | None:
    """The profile's prefix-cache page math, or None if its model is not hybrid/unknown."""
    if profile.kind != "vllm":
        return None
    spec_k = profile.speculative.num_speculative_tokens if profile.speculative else 0
    model_dir = model_dir_for(profile, paths)
    config = read_model_config(model_dir)
    facts = _facts_from_config(config) if config is not None else None
    if facts is None and config is None:
        facts = _KNOWN_BY_NAME.get((profile.served_name or model_dir.name).lower())
    rate = facts.prefill_tok_s if facts else None
    name = facts.name if facts else None

    kept: dict[str, Any] = {}
    if profile.plugin_enabled and "turn_states" in profile.plugin_features:
        unit = _match_unit(profile)
        drops = profile.speculative is not None and profile.speculative.method in EAGLE_LIKE
        kept = {
            "turn_state_unit": unit,
            "turn_state_slack": unit * (2 if drops else 1),
            "kept_turn_states": profile.kept_turn_states or DEFAULT_KEPT_TURN_STATES,
            "kept_state_bytes": facts.kept_state_bytes(spec_k) if facts else None,
        }
    from_log = mamba_block_from_log(log_lines) if log_lines is not None else None
    if from_log is not None:
        return PageMath(profile.name, from_log, "engine log", rate, name, **kept)
    if config is not None and not is_hybrid_config(config):
        return None
    if facts is None:
        return None
    source = (
        f"{model_dir / 'config.json'}"
        if config is not None
        else f"built-in {facts.name} facts (model not present at {model_dir})"
    )
    return PageMath(profile.name, facts.mamba_block_size(spec_k), source, rate, name, **kept)


def _match_unit(profile: Profile) -> int:
    """The profile's ``--prefix-match-unit`` (its own ``extra_args`` win)."""
    args = list(profile.extra_args)
    for i, arg in enumerate(args):
        value = (
            arg.split("=", 1)[1]
            if arg.startswith("--prefix-match-unit=")
            else (args[i + 1] if arg == "--prefix-match-unit" and i + 1 < len(args) else None)
        )
        if value is not None and value.isdigit() and int(value) > 0:
            return int(value)
    return TURN_STATE_UNIT
