"""Optional Triton: kernels import without it and without a GPU.

On a GPU the kernels are compiled by Triton. On a CPU they run only in Triton's interpreter,
which ``TRITON_INTERPRET=1`` selects; it must be set when ``triton`` is first imported and when
the kernel modules are imported (``triton.jit`` decides at decoration time). Without a usable
Triton the public wrappers fall back to the PyTorch references.
"""

from __future__ import annotations

from typing import Any

import torch

try:
    import triton
    import triton.language as tl

    HAVE_TRITON = True
except ImportError:  # pragma: no cover - depends on the environment
    triton = None
    tl = None
    HAVE_TRITON = False

__all__ = ["HAVE_TRITON", "is_interpreted", "launchable", "tl", "triton"]


def is_interpreted(kernel: Any) -> bool:
    """Whether ``kernel`` was decorated in interpreter mode (runs on CPU tensors)."""
    return type(kernel).__name__ == "InterpretedFunction"


def launchable(kernel: Any, device: torch.device) -> bool:
    """Whether ``kernel`` can run on tensors on ``device``.

    An interpreted kernel runs anywhere (slowly); a compiled one needs a CUDA device.
    """
    if not HAVE_TRITON:
        return False
    return is_interpreted(kernel) or device.type == "cuda"
