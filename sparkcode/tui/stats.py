"""The live figures the status bar shows, and how they are measured.

The agent measures from the server's usage reports (``continuous_usage_stats``,
tokens rather than SSE frames: a speculative-decoding engine sends several
tokens per frame) and from ``/metrics`` deltas; this module folds those events
into the one snapshot the status bar renders.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field, replace

from sparkcode.agent.core.events import MetricsUpdate, UsageUpdate


@dataclass(frozen=True)
class LiveStats:
    """One snapshot of what the status bar shows; ``None`` means not known yet."""

    decode_tps: float | None = None
    """Completion tokens per second since the first token of the current request."""
    prefill_tps: float | None = None
    """Prompt tokens divided by the time to first token."""
    ttft_s: float | None = None
    """Seconds from sending the request to the first streamed token."""
    accept_len: float | None = None
    """Mean speculative acceptance length (1 + accepted / drafts); None without drafting."""
    accept_per_pos: tuple[float, ...] | None = None
    """Share of drafts accepted through each draft position (the figure k is tuned by)."""
    prefix_hit_rate: float | None = None
    """Share of prompt tokens served from the prefix cache (0..1)."""
    prefilled: int | None = None
    """Prompt tokens the engine computed for the latest request (its prompt less its
    prefix-cache hit), where the engine reports cached tokens: what an agent step paid
    for. On a hybrid model without kept turn states it includes up to a whole Mamba
    block of tokens seen before (7168 on the Spark); with them, about the new ones."""
    kv_use: float | None = None
    """Share of the KV cache in use (0..1)."""
    context_used: int | None = None
    """Tokens of context the conversation occupies."""
    context_limit: int | None = None
    """The engine's max_model_len."""
    streaming: bool = False
    """True while a response is streaming."""
    waiting_since: float | None = None
    """``time.monotonic()`` when the current request was sent, until its first token:
    the wait (prefill, or a queue in the engine) is shown as it grows."""
    decode_history: tuple[float, ...] = ()
    """Decode tok/s of each finished or running request this session (for the sparkline)."""

    def merged(self, **changes: object) -> LiveStats:
        """A copy with ``changes`` applied; keys whose value is None are ignored."""
        kept = {k: v for k, v in changes.items() if v is not None}
        return replace(self, **kept)  # type: ignore[arg-type]


def _num(value: float | None, fmt: str, unit: str = "") -> str:
    return "–" if value is None else f"{value:{fmt}}{unit}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.0f}%"


def _share(value: float) -> str:
    """0.93 -> '.93' (two digits per draft position keeps k=7 on one line)."""
    return "1.0" if value >= 0.995 else f"{value:.2f}".removeprefix("0")


def short_count(n: int | None) -> str:
    """1234 -> '1.2k'; small numbers stay exact."""
    if n is None:
        return "–"
    if n < 1000:
        return str(n)
    if n < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.1f}M"


def format_stats(stats: LiveStats, now: float | None = None) -> str:
    """The status bar's text (Textual content markup); ``now`` (monotonic) times
    the wait for a request's first token."""
    if stats.waiting_since is not None:
        waited = max(0.0, (time.monotonic() if now is None else now) - stats.waiting_since)
        ttft = f"TTFT [i]waiting {waited:.1f} s[/i]"
    else:
        ttft = f"TTFT {_num(stats.ttft_s, '.2f', ' s')}"
    parts = [
        f"decode [b]{_num(stats.decode_tps, '.1f')}[/b] tok/s",
        f"prefill {_num(stats.prefill_tps, '.0f')} tok/s",
        ttft,
    ]
    if stats.accept_len is not None:
        per_pos = ""
        if stats.accept_per_pos:
            per_pos = " [dim]" + " ".join(_share(p) for p in stats.accept_per_pos) + "[/dim]"
        parts.append(f"accept {stats.accept_len:.2f}{per_pos}")
    cache = f"cache {_pct(stats.prefix_hit_rate)}"
    if stats.prefilled is not None:
        cache += f" [dim]· {short_count(stats.prefilled)} prefilled[/dim]"
    parts += [
        cache,
        f"KV {_pct(stats.kv_use)}",
        f"ctx {short_count(stats.context_used)}/{short_count(stats.context_limit)}",
    ]
    return " │ ".join(parts)


@dataclass
class StatsTracker:
    """Folds the agent's usage and metrics events into :class:`LiveStats`."""

    history_len: int = 60
    """Requests kept for the decode tok/s sparkline."""
    current: LiveStats = field(default_factory=LiveStats)
    _history: deque[float] = field(default_factory=deque)

    def request_started(self, now: float | None = None) -> LiveStats:
        self.current = replace(
            self.current, streaming=True, waiting_since=time.monotonic() if now is None else now
        )
        return self.current

    def usage(self, event: UsageUpdate) -> LiveStats:
        """A (continuous) usage report of the running request."""
        self.current = self.current.merged(
            decode_tps=event.decode_tok_s,
            prefill_tps=event.prefill_tok_s,
            ttft_s=event.ttft_s,
            context_used=event.context_used,
            context_limit=event.context_limit,
            prefilled=None
            if event.cached_tokens is None
            else max(event.prompt_tokens - event.cached_tokens, 0),
        )
        if event.ttft_s is not None or event.final:
            self.current = replace(self.current, waiting_since=None)
        if event.final:
            if event.decode_tok_s is not None:
                self._history.append(event.decode_tok_s)
                while len(self._history) > self.history_len:
                    self._history.popleft()
            history = tuple(self._history)
            self.current = replace(self.current, decode_history=history, streaming=False)
        elif event.decode_tok_s is not None:
            history = (*self._history, event.decode_tok_s)
            self.current = replace(self.current, decode_history=history)
        return self.current

    def metrics(self, event: MetricsUpdate) -> LiveStats:
        """Engine-side figures from /metrics."""
        self.current = self.current.merged(
            accept_len=event.acceptance_length,
            accept_per_pos=event.acceptance_per_pos,
            prefix_hit_rate=event.prefix_cache_hit_rate,
            kv_use=event.kv_cache_usage,
        )
        return self.current

    def output_started(self) -> LiveStats:
        """Text, a tool call or an error arrived: the wait for the first token is over
        (also for servers that report no usage)."""
        if self.current.waiting_since is not None:
            self.current = replace(self.current, waiting_since=None)
        return self.current

    def turn_finished(self) -> LiveStats:
        self.current = replace(
            self.current, streaming=False, waiting_since=None, decode_history=tuple(self._history)
        )
        return self.current

    def reset_context(self) -> LiveStats:
        """After /clear: the conversation no longer occupies context."""
        self.current = replace(self.current, context_used=0)
        return self.current
