"""Boot phases of a vLLM server, read from its log as it starts."""

from __future__ import annotations

import re
from collections.abc import Iterable

# Ordered: a later phase never goes back to an earlier one.
PHASES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("starting", re.compile(r"vLLM API server version|non-default args")),
    ("initializing engine", re.compile(r"Initializing a V1 LLM engine")),
    ("loading weights", re.compile(r"Loading safetensors checkpoint|Starting to load model")),
    ("weights loaded", re.compile(r"Loading weights took|Model loading took")),
    ("compiling", re.compile(r"torch\.compile takes|Compiling a graph|Capturing CUDA graph")),
    ("allocating KV cache", re.compile(r"KV cache size|for KV cache on node|Available KV cache")),
    ("warming up", re.compile(r"init engine \(profile, create kv cache, warmup model\)")),
    ("starting server", re.compile(r"Starting vLLM API server|Available routes")),
    ("server up", re.compile(r"Application startup complete")),
)

PLUGIN_MARKER = "[sparkcode-plugin]"


def phase_of(lines: Iterable[str], current: str | None = None) -> str | None:
    """The latest phase reached, given new log lines and the phase so far."""
    order = [name for name, _ in PHASES]
    best = order.index(current) if current in order else -1
    for line in lines:
        for index, (_, pattern) in enumerate(PHASES):
            if index > best and pattern.search(line):
                best = index
    return order[best] if best >= 0 else current


def plugin_lines(lines: Iterable[str]) -> list[str]:
    """What sparkcode's vLLM plugin reported in the engine log.

    vLLM loads the plugin in each of its processes, so the same line can be
    logged several times; each distinct line is kept once, in order. A feature's
    periodic "live" report (``fp4_pool``'s coverage) keeps only its latest line.
    """
    out: list[str] = []
    live: dict[str, int] = {}
    for line in lines:
        at = line.find(PLUGIN_MARKER)
        if at < 0:
            continue
        text = line[at + len(PLUGIN_MARKER) :].strip()
        if " live " in text:
            feature = text.partition(":")[0]
            if feature in live:
                out[live[feature]] = text
                continue
            live[feature] = len(out)
        if text not in out:
            out.append(text)
    return out
