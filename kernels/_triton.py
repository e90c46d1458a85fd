"""Optional Triton: kernels import without it and without a GPU.

On a GPU the kernels are compiled by Triton. On a CPU they run only in Triton's interpreter,
which ``TRITON_INTERPRET=1`` selects; it must be set before ``triton`` is first imported in
the process (Triton decorates its own library functions at import time). Without a usable
Triton the public wrappers fall back to the PyTorch references.
"""

from __future__ import annotations

import os

import torch

try:
    import triton
    import triton.language as tl

    HAVE_TRITON = True
except ImportError:  # pragma: no cover - depends on the environment
    triton = None
    tl = None
    HAVE_TRITON = False

__all__ = ["HAVE_TRITON", "interpreting", "tl", "triton", "usable_on"]


def interpreting() -> bool:
    """Whether Triton was imported in interpreter mode (``TRITON_INTERPRET=1``)."""
    if not HAVE_TRITON:
        return False
    try:
        from triton import knobs

        return bool(knobs.runtime.interpret)
    except ImportError:  # pragma: no cover - older Triton
        return bool(os.environ.get("TRITON_INTERPRET"))


def usable_on(device: torch.device) -> bool:
    """Whether the Triton kernels can run on tensors on ``device``."""
    if not HAVE_TRITON:
        return False
    if interpreting():
        return True
    return device.type == "cuda"
