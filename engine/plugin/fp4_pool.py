"""Feature ``fp4_pool``: serve the checkpoint's FP4 hot-expert pool and report live coverage.

It works inside ``w2_quant``'s loading and expert method (``engine.plugin._fp4_pool``): with
it on, the ``_fp4*`` copies of the experts that ``quantization_config.fp4_pool.experts``
lists are loaded, those experts are computed from 4 bits instead of 2, and the engine log gets
a line with the live share of routed tokens served at 4 bits. Without ``w2_quant`` there is
nothing to act on.
"""

from __future__ import annotations

from ._registry import FeatureResult

NAME = "fp4_pool"


def apply() -> FeatureResult:
    from . import selected_features

    if "w2_quant" not in selected_features():
        return FeatureResult(NAME, "not applied", "needs the w2_quant feature")
    return FeatureResult(
        NAME, "applied", "pooled experts served from their FP4 copies, live coverage logged"
    )
