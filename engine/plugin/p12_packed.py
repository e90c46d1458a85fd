"""Feature ``p12_packed``: large BF16 linears and embeddings stay in their 12-bit P12 form.

It works inside ``w2_quant``'s quantization method and loader (``engine.plugin._p12_linear``):
with it on, BF16 weights of at least ``SPARKCODE_P12_MIN_VALUES`` values (default 2^20) keep
their P12 payload in memory and are computed from it; the load line in the engine log says
how many layers and how many bytes that saved. Without ``w2_quant`` there is nothing to act on.
"""

from __future__ import annotations

from ._registry import FeatureResult

NAME = "p12_packed"


def apply() -> FeatureResult:
    from . import selected_features

    if "w2_quant" not in selected_features():
        return FeatureResult(NAME, "not applied", "needs the w2_quant feature")
    return FeatureResult(NAME, "applied", "BF16 linears and embeddings served from P12 codes")
