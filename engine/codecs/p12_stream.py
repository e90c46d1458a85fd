"""Reading a sparkcode checkpoint as a stream of ``(name, tensor)`` for a model loader.

A loader (vLLM's, through ``engine.plugin.w2_quant``) walks a checkpoint tensor by tensor.
:func:`decode_stream` sits between the files and the model:

* the five ``_p12*`` tensors of a P12-packed BF16 weight are gathered and decoded back into
  the original tensor under its original name (bit-exact), so the model loads it as usual;
  the decoded tensor also carries its packed form as the attribute ``P12_ATTR``, so a layer
  that keeps its weights packed (``engine.plugin._p12_linear``) stores that instead;
* W2 routed-expert tensors (``_packed``, ``_scale``, ``_shape``) pass through for the serving
  method to keep in 2 bits;
* FP4 pool copies (``_fp4*``) pass through when ``keep_fp4`` is set, and are dropped (and
  counted) otherwise;
* anything else passes through unchanged.

A P12 group that never completes (a tensor missing from the files) is an error naming it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch

from engine.codecs import p12
from engine.codecs.format import (
    FP4_GLOBAL_SCALE_SUFFIX,
    FP4_PACKED_SUFFIX,
    FP4_SCALE_SUFFIX,
    FP4_SHAPE_SUFFIX,
    P12_ESCAPE_INDEX_SUFFIX,
    P12_ESCAPE_VALUE_SUFFIX,
    P12_EXPONENTS_SUFFIX,
    P12_PAYLOAD_SUFFIX,
    P12_SHAPE_SUFFIX,
)

__all__ = ["P12_ATTR", "LoadStats", "decode_stream", "packed_form"]

#: Attribute of a decoded tensor holding the :class:`~engine.codecs.p12.PackedBF16` it came from.
P12_ATTR = "sparkcode_p12"

_P12 = (
    P12_ESCAPE_INDEX_SUFFIX,
    P12_ESCAPE_VALUE_SUFFIX,
    P12_EXPONENTS_SUFFIX,
    P12_SHAPE_SUFFIX,
    P12_PAYLOAD_SUFFIX,
)  # longest first: "_p12" is a suffix of none of the others, but they all start with it
_FP4 = (FP4_GLOBAL_SCALE_SUFFIX, FP4_SCALE_SUFFIX, FP4_SHAPE_SUFFIX, FP4_PACKED_SUFFIX)


def _split_suffix(name: str, suffixes: tuple[str, ...]) -> tuple[str, str] | None:
    """``(original name, suffix)`` if ``name`` ends with one of ``suffixes`` (tried in order)."""
    for suffix in suffixes:
        if name.endswith(suffix):
            return name[: -len(suffix)], suffix
    return None


@dataclass
class LoadStats:
    """What :func:`decode_stream` did, for the engine log."""

    p12_decoded: int = 0
    fp4_dropped: int = 0
    passed: int = 0


def decode_stream(
    weights: Iterable[tuple[str, torch.Tensor]],
    *,
    keep_fp4: bool = False,
    stats: LoadStats | None = None,
) -> Iterator[tuple[str, torch.Tensor]]:
    """Decode P12 groups in ``weights`` and drop or keep FP4 copies; see the module docstring."""
    stats = stats if stats is not None else LoadStats()
    pending: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in weights:
        split = _split_suffix(name, _P12)
        if split is not None:
            base, suffix = split
            group = pending.setdefault(base, {})
            group[base + suffix] = tensor
            if len(group) == len(_P12):
                del pending[base]
                stats.p12_decoded += 1
                packed = p12.PackedBF16.from_state_dict(group, base)
                decoded = p12.unpack(packed)
                setattr(decoded, P12_ATTR, packed)
                yield base, decoded
            continue
        if not keep_fp4 and _split_suffix(name, _FP4) is not None:
            stats.fp4_dropped += 1
            continue
        stats.passed += 1
        yield name, tensor
    if pending:
        missing = []
        for base, group in sorted(pending.items()):
            absent = [base + s for s in _P12 if base + s not in group]
            missing.append(f"{base} (missing {', '.join(absent)})")
        raise ValueError(f"incomplete P12 tensors in the checkpoint: {'; '.join(missing)}")


def packed_form(tensor: torch.Tensor) -> p12.PackedBF16 | None:
    """The packed form :func:`decode_stream` attached to ``tensor``, if it is still whole.

    A loader that narrowed or reshaped the tensor gets None (the attribute does not follow
    views), and so does one whose shape no longer matches.
    """
    packed = getattr(tensor, P12_ATTR, None)
    if isinstance(packed, p12.PackedBF16) and packed.shape == tuple(tensor.shape):
        return packed
    return None
