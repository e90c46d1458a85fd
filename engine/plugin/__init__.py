"""sparkcode's vLLM general plugin (entry point ``vllm.general_plugins: sparkcode``).

vLLM calls :func:`register` once in every process it starts (API server,
engine core, workers). The profile picks features through
``SPARKCODE_PLUGIN_FEATURES`` (a comma list, set by the profile renderer; empty
or unset means the plugin does nothing). Each selected feature writes one line
starting with ``[sparkcode-plugin]`` to the engine log, which
``sparkcode engine status`` shows as ``plugin`` rows.
"""

from __future__ import annotations

import os

from ._registry import (
    FEATURES,
    MARKER,
    Emit,
    FeatureResult,
    emit_stderr,
    register_feature,
    run_feature,
)

__all__ = [
    "ENV_FEATURES",
    "FEATURES",
    "MARKER",
    "FeatureResult",
    "register",
    "register_feature",
    "run_features",
    "selected_features",
]

ENV_FEATURES = "SPARKCODE_PLUGIN_FEATURES"

# Feature lists already handled in this process: vLLM may call register() more
# than once per process (and tests do); the second call must change nothing.
_DONE: dict[tuple[str, ...], list[FeatureResult]] = {}


def selected_features(value: str | None = None) -> tuple[str, ...]:
    """The feature names in ``value`` (default: the environment), in order, once each."""
    raw = os.environ.get(ENV_FEATURES, "") if value is None else value
    names: list[str] = []
    for part in raw.split(","):
        name = part.strip()
        if name and name not in names:
            names.append(name)
    return tuple(names)


def run_features(names: tuple[str, ...], emit: Emit = emit_stderr) -> list[FeatureResult]:
    """Apply ``names`` once per process and report each; never raises."""
    if names in _DONE:
        return _DONE[names]
    results: list[FeatureResult] = []
    for name in names:
        result = run_feature(name)
        results.append(result)
        try:
            emit(result.line())
        except Exception:  # noqa: BLE001 - a closed stderr must not stop vLLM
            pass
    _DONE[names] = results
    return results


def register() -> None:
    """vLLM's entry point: apply the features the profile selected."""
    names = selected_features()
    if names:
        run_features(names)
