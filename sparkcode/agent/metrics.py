"""Engine figures from vLLM's Prometheus ``/metrics``, as deltas between polls.

Counters only ever grow, so rates over one request come from the difference
of two scrapes: speculative acceptance length = 1 + accepted / drafts,
prefix-cache hit rate = hits / queries (tokens). KV-cache use is a gauge.
Samples are summed over label sets (several engines or models).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from .events import MetricsUpdate

ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
DRAFTS = "vllm:spec_decode_num_drafts_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
_WANTED = frozenset({ACCEPTED, DRAFTS, PREFIX_HITS, PREFIX_QUERIES, RUNNING, WAITING, *KV_USAGE})


def parse_metrics(text: str) -> dict[str, float]:
    """The samples sparkcode uses, summed over labels."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in _WANTED:
                out[sample.name] = out.get(sample.name, 0.0) + float(sample.value)
    return out


@dataclass
class MetricsDelta:
    """Compute :class:`MetricsUpdate` from two scrapes."""

    previous: dict[str, float] | None = None

    def update(self, current: dict[str, float]) -> MetricsUpdate:
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
        return MetricsUpdate(
            acceptance_length=acceptance, prefix_cache_hit_rate=hit_rate, kv_cache_usage=kv,
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
