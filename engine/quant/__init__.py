"""The offline converter: FP8 checkpoint in, sparkcode checkpoint out (GPTQ/RTN, pool choice).

Modules: ``pipeline`` (the shard loop), ``converter`` (one tensor), ``checkpoint`` (reading the
source), ``gptq`` and ``calib`` (calibrated W2), ``hotpool`` (which experts get an FP4 copy),
``manifest`` (resumable progress), ``inspect`` (per-layer report). The serve-time codecs it
writes live in ``engine.codecs``; the format is specified in ``docs/quant-format.md``.
"""

from engine.codecs.format import FORMAT_VERSION, QUANT_METHOD

__all__ = ["FORMAT_VERSION", "QUANT_METHOD"]
