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

__all__ = ["HAVE_TRITON", "is_interpreted", "launchable", "word_bytes", "tl", "triton", "word_rows"]


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


def word_rows(t: torch.Tensor) -> tuple[torch.Tensor, int]:
    """``t`` (uint8 ``[rows, n]``) as rows of whole 32-bit words, and the words per row.

    The kernels read packed bytes as 32-bit words (one byte per lane is a scattered
    ``LDG.E.U8``), so each row must start on a 4-byte boundary. A contiguous tensor whose base
    is 4-byte aligned and whose rows are a whole number of words (W2 scales at in % 128 == 0,
    GLM-5.3-Flash's 4096 and 2048) is passed as is; otherwise the rows are copied once with
    zero padding (in-memory only: the stored format is unchanged).
    """
    t = t.contiguous()
    n = int(t.shape[1])
    pad = -n % 4
    if pad or t.data_ptr() % 4:
        t = torch.nn.functional.pad(t, (0, pad))
    return t, (n + pad) // 4


if HAVE_TRITON:

    @triton.jit
    def word_bytes(word):  # type: ignore[no-untyped-def]  # Triton reads the signature
        """The bytes of int32 ``word [R, W]`` as int32 ``[R, 4 * W]``, little-endian (byte
        ``4w + b`` of a row is bits ``8b .. 8b + 7`` of its word ``w``): the kernels load packed
        data as 32-bit words and split them in registers."""
        shift = tl.arange(0, 4) * 8
        return tl.reshape(
            (word[:, :, None] >> shift[None, None, :]) & 0xFF, [word.shape[0], 4 * word.shape[1]]
        )
