"""The serve-time codecs of the sparkcode checkpoint format, imported by the vLLM plugin.

``w2`` (2-bit routed experts), ``p12`` (lossless 12-bit BF16, with ``p12_stream`` decoding a
checkpoint for a loader), ``nvfp4`` (the FP4 hot-pool copy), ``format`` (format version and
tensor names), ``hotpool`` (which experts get the FP4 copy: offline choice and the live
selector), ``calib_file`` (the calibration file and the hooks that capture it). The
offline converter that writes them is ``engine.quant``; the format is specified in
``docs/quant-format.md``. At serve time the plugin imports these and its own modules only
(``tests/layout/test_plugin_imports.py``), never ``engine.quant``.
"""

from engine.codecs.format import FORMAT_VERSION, QUANT_METHOD

__all__ = ["FORMAT_VERSION", "QUANT_METHOD"]
