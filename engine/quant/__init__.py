"""The sparkcode quantizer: codecs (W2, P12, NVFP4), the FP4 hot-expert pool and the pipeline.

Codec modules: ``w2`` (2-bit routed experts), ``bf16pack`` (lossless 12-bit BF16), ``nvfp4``
(the FP4 hot-pool copy), ``hotpool`` (pool selection), ``format`` (format version and tensor
names). The format is specified in ``docs/quant-format.md``.
"""

from engine.quant.format import FORMAT_VERSION, QUANT_METHOD

__all__ = ["FORMAT_VERSION", "QUANT_METHOD"]
