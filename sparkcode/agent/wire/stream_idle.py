"""How long a stream may stay silent: ``[agent] stream_idle_timeout_s`` and its default.

vLLM sends nothing while it prefills a prompt, so the read timeout of a chat stream
bounds the prefill too. A fixed limit is wrong at both ends: on the slowest CPU
profile (5.8 tokens/s of prefill in bf16 without bf16 arithmetic, ``engine.profiles._cpu``)
600 s cover about 3.5k uncached tokens, so a resumed or compacted conversation
could time out while the engine works.

So, unless the user sets the limit, it follows this session's measured prefill rate
and the tokens to prefill: ``max(600, tokens / rate * SAFETY)``. The rate is
measured on the session's own requests (:func:`measured_prefill`): the uncached
prompt tokens over the time to the first token, from requests that prefilled at
least :data:`MIN_MEASURED` tokens (a short one's time is mostly overhead). The
tokens to prefill are the whole prompt's estimate: after a compaction or a resume
nothing of it may be cached, and a longer limit only delays the report of an engine that hangs.
Without a measured rate the limit is :data:`DEFAULT_IDLE_S`.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_IDLE_S = 600.0
"""The limit without a measured rate, and the least the rule gives."""
SAFETY = 2.0
"""The measured rate may drop (a longer prompt prefills slower per token, another
request shares the engine); twice the expected prefill time is still a limit."""
MIN_MEASURED = 256
"""Uncached prompt tokens a request must have prefilled for its rate to count."""
SETTING = "[agent] stream_idle_timeout_s"
"""The setting's name as the error says it."""


@dataclass
class PrefillRate:
    """The latest measured prefill rate of one target (shared by a client's views)."""

    tok_s: float | None = None

    def observe(self, prompt_tokens: int, cached_tokens: int | None, ttft_s: float | None) -> None:
        rate = measured_prefill(prompt_tokens, cached_tokens, ttft_s)
        if rate is not None:
            self.tok_s = rate


def measured_prefill(
    prompt_tokens: int, cached_tokens: int | None, ttft_s: float | None
) -> float | None:
    """Uncached prompt tokens per second of time to first token, or None where the
    request prefilled fewer than :data:`MIN_MEASURED` tokens or has no first token."""
    uncached = prompt_tokens - (cached_tokens or 0)
    if ttft_s is None or ttft_s <= 0 or uncached < MIN_MEASURED:
        return None
    return uncached / ttft_s


def idle_timeout_s(
    setting: float | None, prefill_tok_s: float | None, tokens_to_prefill: int
) -> float:
    """The silence limit of one stream: ``setting`` where the user set it, else
    ``max(DEFAULT_IDLE_S, tokens_to_prefill / prefill_tok_s * SAFETY)``, else (no
    measured rate) :data:`DEFAULT_IDLE_S`."""
    if setting is not None:
        return setting
    if not prefill_tok_s or prefill_tok_s <= 0:
        return DEFAULT_IDLE_S
    return max(DEFAULT_IDLE_S, tokens_to_prefill / prefill_tok_s * SAFETY)


def silence_message(source: str, waited_s: float) -> str:
    """The error of a stream that stayed silent past its limit."""
    waited = f"{waited_s:.0f}" if waited_s >= 10 else f"{waited_s:.1f}".removesuffix(".0")
    return (
        f"{source} sent nothing for {waited} s, the stream's silence limit "
        f"({SETTING}; set it higher in config.toml if the engine prefills this "
        "slowly)"
    )
