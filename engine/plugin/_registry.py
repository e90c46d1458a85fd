"""The plugin's feature registry and the status lines features report.

A feature is a function ``apply() -> FeatureResult`` in its own module,
registered here by name and imported only when a profile selects it, so that a
feature's dependencies (vLLM internals, kernels) load only in engines that use
it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

MARKER = "[sparkcode-plugin]"

Outcome = Literal[
    "applied",
    "active",
    "inactive",
    "not needed",
    "not applied",
    "not available",
    "failed",
    "warning",
]

FEATURE_MARK = "__sparkcode_feature__"
"""Attribute set on every function a feature installs into vLLM."""


@dataclass(frozen=True)
class FeatureResult:
    """What one feature did in this process, as one log line."""

    feature: str
    outcome: Outcome
    detail: str

    @property
    def ok(self) -> bool:
        """True if the engine runs as the profile asked."""
        return self.outcome in ("applied", "active", "inactive", "not needed")

    def line(self) -> str:
        return f"{MARKER} {self.feature}: {self.outcome} ({self.detail})"


Emit = Callable[[str], None]


def emit_stderr(line: str) -> None:
    """Write one status line to the engine log (stderr is captured there)."""
    print(line, file=sys.stderr, flush=True)


# name -> "module:function"; the function takes no arguments and returns a
# FeatureResult. Names must also be listed in engine.profiles PLUGIN_FEATURES.
FEATURES: dict[str, str] = {
    "scheduler_fix": "engine.plugin.scheduler_fix:apply",
    "w2_quant": "engine.plugin.w2_quant:apply",
    "fp4_pool": "engine.plugin.fp4_pool:apply",
    "calib_capture": "engine.plugin.calib_capture:apply",
    "p12_packed": "engine.plugin.p12_packed:apply",
    "turn_states": "engine.plugin.turn_states:apply",
    "cpu_seeded_chunks": "engine.plugin.cpu_seeded_chunks:apply",
    "cpu_int8_float32": "engine.plugin.cpu_int8_float32:apply",
}


def register_feature(name: str, target: str) -> None:
    """Make ``name`` selectable; ``target`` is ``"package.module:function"``."""
    if ":" not in target:
        raise ValueError(f"feature target must be 'module:function', got {target!r}")
    FEATURES[name] = target


def run_feature(name: str) -> FeatureResult:
    """Apply one feature; never raises (a plugin must not crash the engine)."""
    target = FEATURES.get(name)
    if target is None:
        return FeatureResult(name, "not available", "this sparkcode build has no such feature")
    module_name, _, func_name = target.partition(":")
    try:
        func = getattr(importlib.import_module(module_name), func_name)
        result = func()
    except Exception as exc:  # noqa: BLE001 - reported, never raised into vLLM
        return FeatureResult(name, "failed", f"{type(exc).__name__}: {exc}")
    if not isinstance(result, FeatureResult):
        return FeatureResult(name, "failed", f"{target} returned {type(result).__name__}")
    return result
