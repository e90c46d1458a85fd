"""Constants of the sparkcode quantized checkpoint format (spec: ``docs/quant-format.md``).

Every encoded tensor is stored under ``<original tensor name><suffix>``; e.g. the routed
expert weight ``...experts.7.gate_proj.weight`` becomes ``...experts.7.gate_proj.weight_packed``
plus ``..._scale`` and ``..._shape``. A reader finds the encoding of a tensor by its suffixes.
"""

from __future__ import annotations

from typing import Final

#: Bumped whenever a tensor name, dtype or bit layout changes incompatibly.
FORMAT_VERSION: Final = 1
#: ``quantization_config.quant_method`` in the output config.json.
QUANT_METHOD: Final = "sparkcode_w2"

# W2 routed experts (engine.codecs.w2).
W2_PACKED_SUFFIX: Final = "_packed"  # uint8 [out, in/4], 4 codes per byte
W2_SCALE_SUFFIX: Final = "_scale"  # uint8 [out, in/32], ue5m3
W2_SHAPE_SUFFIX: Final = "_shape"  # int64 [2] = (out, in)
W2_SCALE_DTYPE: Final = "ue5m3"

# Lossless 12-bit BF16 (engine.codecs.p12).
P12_PAYLOAD_SUFFIX: Final = "_p12"  # uint8 [3 * ceil(n/2)]
P12_EXPONENTS_SUFFIX: Final = "_p12_exponents"  # uint8 [16]
P12_ESCAPE_INDEX_SUFFIX: Final = "_p12_escape_index"  # int64 [k], ascending flat positions
P12_ESCAPE_VALUE_SUFFIX: Final = "_p12_escape_value"  # uint16 [k], raw bf16 bits
P12_SHAPE_SUFFIX: Final = "_p12_shape"  # int64 [ndim]

# FP4 hot-expert pool (engine.codecs.nvfp4): a second copy of selected expert weights.
FP4_PACKED_SUFFIX: Final = "_fp4"  # uint8 [out, in/2], e2m1, 2 per byte, low nibble first
FP4_SCALE_SUFFIX: Final = "_fp4_scale"  # float8_e4m3fn [out, in/16]
FP4_GLOBAL_SCALE_SUFFIX: Final = "_fp4_global_scale"  # float32 [1]
FP4_SHAPE_SUFFIX: Final = "_fp4_shape"  # int64 [2]

#: Every suffix this format version writes, longest first (so a reader matches greedily).
ALL_SUFFIXES: Final = tuple(
    sorted(
        (
            W2_PACKED_SUFFIX,
            W2_SCALE_SUFFIX,
            W2_SHAPE_SUFFIX,
            P12_PAYLOAD_SUFFIX,
            P12_EXPONENTS_SUFFIX,
            P12_ESCAPE_INDEX_SUFFIX,
            P12_ESCAPE_VALUE_SUFFIX,
            P12_SHAPE_SUFFIX,
            FP4_PACKED_SUFFIX,
            FP4_SCALE_SUFFIX,
            FP4_GLOBAL_SCALE_SUFFIX,
            FP4_SHAPE_SUFFIX,
        ),
        key=len,
        reverse=True,
    )
)


DEFAULT_MIN_TOKENS: Final = 128
"""Routed tokens an expert needs for its own down-projection Hessian (else the fallback)."""
