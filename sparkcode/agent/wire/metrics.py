"""Engine figures from vLLM's Prometheus ``/metrics``, as deltas between polls.

Counters only ever grow, so rates over one request come from the difference
of two scrapes: speculative acceptance length = 1 + accepted / drafts,
acceptance at draft position i = accepted at i / drafts (the share of drafts
whose first i+1 tokens were all accepted), prefix-cache hit rate = hits /
queries (tokens). KV-cache use is a gauge. Samples are summed over label sets
(several engines or models), per-position ones per position.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from ..core.events import MetricsUpdate

ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
"""One sample per draft position (label ``position``); stored as ``NAME:POS``."""
PREFIX_HITS = "vllm:prefix_cache_hits_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
_WANTED = frozenset(
    {ACCEPTED, DRAFTS, DRAFT_TOKENS, PREFIX_HITS, PREFIX_QUERIES, RUNNING, WAITING, *KV_USAGE}
)


def parse_metrics(text: str) -> dict[str, float]:
    """The samples sparkcode uses, summed over labels (per-position acceptance is
    kept per position, as ``ACCEPTED_PER_POS:POS``)."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            if name == ACCEPTED_PER_POS:
                name = f"{name}:{sample.labels.get('position', '0')}"
            elif name not in _WANTED:
                continue
            out[name] = out.get(name, 0.0) + float(sample.value)
    return out


def per_position(scrape: dict[str, float]) -> list[float]:
    """The per-position accepted counters of a parsed scrape, position 0 first."""
    prefix = ACCEPTED_PER_POS + ":"
    found = {
        int(k[len(prefix) :]): v
        for k, v in scrape.items()
        if k.startswith(prefix) and k[len(prefix) :].isdigit()
    }
    return [found.get(i, 0.0) for i in range(max(found) + 1)] if found else []


def acceptance_per_position(
    before: dict[str, float], after: dict[str, float]
) -> tuple[float, ...] | None:
    """Share of drafts accepted through each position between two scrapes."""
    drafts = after.get(DRAFTS, 0.0) - before.get(DRAFTS, 0.0)
    now, then = per_position(after), per_position(before)
    if drafts <= 0 or not now:
        return None
    then = then + [0.0] * (len(now) - len(then))
    return tuple((a - b) / drafts for a, b in zip(now, then, strict=True))


@dataclass
class MetricsDelta:
    """Compute :class:`MetricsUpdate` from two scrapes."""

    previous: dict[str, float] | None = None

    def update(self, current: dict[str, float]) -> MetricsUpdate:
        first = self.previous is None
        prev = self.previous or {}
        self.previous = current

        def delta(name: str) -> float | None:
            if name not in current:
                return None
            return current[name] - prev.get(name, 0.0) if self.previous is not None else None

        drafts, accepted = delta(DRAFTS), delta(ACCEPTED)
        acceptance = (1.0 + accepted / drafts) if drafts and accepted is not None else None
        queries, hits = delta(PREFIX_QUERIES), delta(PREFIX_HITS)
        hit_rate = hits / queries if queries and hits is not None else None
        kv = next((current[k] for k in KV_USAGE if k in current), None)
        running = current.get(RUNNING)
        waiting = current.get(WAITING)
        per_pos = None if first else acceptance_per_position(prev, current)
        return MetricsUpdate(
            acceptance_length=acceptance,
            acceptance_per_pos=per_pos,
            prefix_cache_hit_rate=hit_rate,
            kv_cache_usage=kv,
            running=int(running) if running is not None else None,
            waiting=int(waiting) if waiting is not None else None,
        )


class MetricsPoller:
    """Scrapes ``/metrics`` through ``fetch`` (e.g. ``ChatClient.fetch_metrics``).

    The first :meth:`poll` only sets the baseline for counters (rates ``None``);
    a server without ``/metrics`` (hosted APIs) makes every poll return None.
    """

    def __init__(self, fetch: Callable[[], Awaitable[str | None]]) -> None:
        self._fetch = fetch
        self._delta = MetricsDelta()
        self.available = True

    async def poll(self) -> MetricsUpdate | None:
        if not self.available:
            return None
        text = await self._fetch()
        if text is None:
            self.available = False
            return None
        try:
            current = parse_metrics(text)
        except ValueError:
            self.available = False
            return None
        return self._delta.update(current)
