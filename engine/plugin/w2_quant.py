"""Feature ``w2_quant``: vLLM serves sparkcode checkpoints (``quant_method: sparkcode_w2``).

Two parts, both installed in every vLLM process the plugin runs in:

* the quantization method ``sparkcode_w2`` (``engine.plugin._w2_moe``) is registered, so vLLM
  accepts the checkpoint's ``quantization_config`` and keeps routed experts in 2 bits;
* vLLM's default weight loader is wrapped, for checkpoints with that method only, by
  ``engine.codecs.p12_stream.decode_stream``: P12-packed BF16 tensors are decoded bit-exactly on
  the way in. FP4 pool copies pass through to the experts when the ``fp4_pool`` feature is
  also on, and are skipped and counted otherwise.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator
from typing import Any

from engine.codecs.format import QUANT_METHOD

from ._registry import FEATURE_MARK, MARKER, FeatureResult

NAME = "w2_quant"
LOADER = "vllm.model_executor.model_loader.default_loader"


def apply() -> FeatureResult:
    """Register the method and wrap the loader; idempotent within a process."""
    import importlib

    from vllm.model_executor.layers.quantization import register_quantization_config

    from ._w2_moe import SparkcodeW2Config

    register_quantization_config(QUANT_METHOD)(SparkcodeW2Config)
    loader_cls = importlib.import_module(LOADER).DefaultModelLoader
    current = loader_cls.get_all_weights
    if getattr(current, FEATURE_MARK, None) != NAME:  # vLLM may load the plugin twice
        loader_cls.get_all_weights = _wrap(current)
    return FeatureResult(
        NAME, "applied", f"quantization method {QUANT_METHOD!r} registered, P12 decoded on load"
    )


def _wrap(get_all_weights: Any) -> Any:
    from engine.codecs.p12_stream import LoadStats, decode_stream

    @functools.wraps(get_all_weights)
    def wrapped(self: Any, model_config: Any, model: Any) -> Iterator[tuple[str, Any]]:
        weights = get_all_weights(self, model_config, model)
        if getattr(model_config, "quantization", None) != QUANT_METHOD:
            return weights  # type: ignore[no-any-return]
        from . import selected_features

        packed = "p12_packed" in selected_features()
        if packed:
            from ._p12_linear import adopt_embeddings

            adopt_embeddings(model)  # before vLLM's loader looks at the parameters
        return _decoded(weights, model, "fp4_pool" in selected_features(), packed)

    def _decoded(
        weights: Any, model: Any, keep_fp4: bool, packed: bool
    ) -> Iterator[tuple[str, Any]]:
        stats = LoadStats()
        yield from decode_stream(weights, keep_fp4=keep_fp4, stats=stats)
        note = (
            f"{MARKER} {NAME}: loaded ({stats.p12_decoded} P12 tensors decoded, "
            f"{stats.passed} passed through"
        )
        if stats.fp4_dropped:
            note += f", {stats.fp4_dropped} FP4 pool tensors skipped: fp4_pool is off"
        if packed:
            from ._p12_linear import packed_layers

            n, kept, plain = packed_layers(model)
            note += (
                f"; {n} BF16 layers kept packed: {kept / 2**20:.1f} MiB instead of "
                f"{plain / 2**20:.1f} MiB"
            )
        print(note + ")", file=sys.stderr, flush=True)

    setattr(wrapped, FEATURE_MARK, NAME)
    return wrapped
