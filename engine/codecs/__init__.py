"""The serve-time codecs of the sparkcode checkpoint format, imported by the vLLM plugin.

``w2`` (2-bit routed experts), ``p12`` (lossless 12-bit BF16, with ``p12_stream`` decoding a
checkpoint for a loader), ``nvfp4`` (the FP4 hot-pool copy), ``format`` (format version and
tensor names). The offline converter that writes them is ``engine.quant``; the format is
specified in ``docs/quant-format.md``.
"""

from engine.codecs.format import FORMAT_VERSION, QUANT_METHOD

__all__ = ["FORMAT_VERSION", "QUANT_METHOD"]
