"""The launches the check compiles: each kernel's own Python wrapper, called at GLM-5.3-Flash
shapes on fake CUDA tensors, with ``JITFunction.run`` replaced by a recorder.

Nothing is allocated (``FakeTensorMode`` tensors have shapes and dtypes, no storage) and
nothing launches, so the recorded arguments are exactly what a launch on a GB10 would pass:
the tiles, ``BLOCK_*`` sizes, warps and stages the wrappers choose today or after a rewrite.
A wrapper that no longer launches a kernel for a case fails the check (nothing recorded).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

# GLM-5.3-Flash (docs/architecture.md, ../shared/notes/glm53-flash.md).
HIDDEN, INTER, EXPERTS, TOP_K, VOCAB = 4096, 2048, 288, 8, 154880
POOL_SLOTS = 16  # any positive count: the slot count is not part of a specialization
SWIGLU_LIMIT = 10.0


@dataclass(frozen=True)
class Arg:
    """One launch argument: a tensor (dtype name and shape; a pointer to the kernel) or a
    scalar passed as is (ints keep their values: Triton specializes on % 16 and == 1)."""

    dtype: str | None
    shape: tuple[int, ...]
    value: bool | int | float | None = None

    @property
    def nbytes(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n * torch.empty(0, dtype=getattr(torch, self.dtype or "uint8")).element_size()


@dataclass(frozen=True)
class Launch:
    """One recorded ``kernel[grid](...)`` call of one case."""

    case: str  # e.g. "moe decode T=1 pool"
    module: str  # where the @triton.jit function lives
    kernel: str
    grid: tuple[int, ...]
    args: tuple[Arg, ...]
    kwargs: tuple[tuple[str, bool | int | float], ...]
    tokens: int  # tokens of the case (MoE: to size the routed experts), 0 otherwise

    @property
    def name(self) -> str:
        return f"{self.kernel} [{self.case}]"


def _arg(value: Any) -> Arg:
    if isinstance(value, torch.Tensor):
        return Arg(str(value.dtype).removeprefix("torch."), tuple(int(s) for s in value.shape))
    if isinstance(value, (bool, int, float)):
        return Arg(None, (), value)
    raise TypeError(f"launch argument of type {type(value).__name__} is not supported")


@contextmanager
def _recording(case: str, tokens: int, out: list[Launch]) -> Iterator[None]:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from triton.runtime.jit import JITFunction

    orig = JITFunction.run

    def run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> None:
        if callable(grid):
            raise TypeError(f"{self.fn.__name__}: a callable grid is not supported")
        grid_t = tuple(int(g) for g in grid)
        out.append(
            Launch(
                case,
                self.fn.__module__,
                self.fn.__name__,
                grid_t,
                tuple(_arg(a) for a in args),
                tuple(sorted((k, v) for k, v in kwargs.items())),
                tokens,
            )
        )

    JITFunction.run = run
    try:
        with FakeTensorMode(), _TensorIndexing():
            yield
    finally:
        JITFunction.run = orig


class _TensorIndexing(TorchFunctionMode):
    """``t[i]`` on a fake CUDA tensor takes a device guard that a CPU-only torch lacks; the
    same ops called directly (``aten.index``, ``aten.slice``, ``aten.select``) work."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.Tensor.__getitem__:
            t, i = args
            if isinstance(i, torch.Tensor):
                return torch.ops.aten.index.Tensor(t, [i])
            if isinstance(i, slice):
                return torch.ops.aten.slice.Tensor(t, 0, i.start, i.stop, i.step or 1)
            if isinstance(i, int):
                return torch.ops.aten.select.int(t, 0, i)
        return func(*args, **(kwargs or {}))


def _moe_weights(pool: bool, experts: int = EXPERTS) -> Any:
    from kernels.w2_moe_layout import MoEWeights

    e, h, i, s = experts, HIDDEN, INTER, POOL_SLOTS if pool else 0

    def t(*shape: int, dtype: torch.dtype = torch.uint8) -> torch.Tensor:
        return torch.empty(*shape, dtype=dtype, device="cuda")

    f8 = torch.float8_e4m3fn
    return MoEWeights(
        t(e, 2 * i, h // 4),
        t(e, 2 * i, h // 32),
        t(e, h, i // 4),
        t(e, h, i // 32),
        t(e, dtype=torch.int32),
        t(s, 2 * i, h // 2),
        t(s, 2 * i, h // 16, dtype=f8),
        t(s, 2, dtype=torch.float32),
        t(s, h, i // 2),
        t(s, h, i // 16, dtype=f8),
        t(s, 1, dtype=torch.float32),
    )


def _moe(tokens: int, pool: bool, ep: bool = False) -> Callable[[], object]:
    """One fused MoE call; ``ep``: expert parallelism over 2 ranks (half the experts local,
    global ids mapped through an expert map: the kernels' LOCAL_ONLY specializations)."""

    def call() -> object:
        from kernels.w2_moe import w2_fused_moe

        local = EXPERTS // 2 if ep else EXPERTS
        x = torch.empty(tokens, HIDDEN, dtype=torch.bfloat16, device="cuda")
        ids = torch.empty(tokens, TOP_K, dtype=torch.int32, device="cuda")
        wts = torch.empty(tokens, TOP_K, dtype=torch.float32, device="cuda")
        counts = torch.empty(local, dtype=torch.int64, device="cuda")
        expert_map = torch.empty(EXPERTS, dtype=torch.int32, device="cuda") if ep else None
        return w2_fused_moe(
            x,
            wts,
            ids,
            _moe_weights(pool, local),
            SWIGLU_LIMIT,
            False,
            counts,
            expert_map=expert_map,
        )

    return call


def _codecs() -> list[tuple[str, int, Callable[[], object]]]:
    from kernels.nvfp4_dequant import nvfp4_dequant
    from kernels.p12_embed import p12_gather_rows
    from kernels.p12_gemv import p12_gemv
    from kernels.p12_layout import TABLE_SIZE, payload_nbytes
    from kernels.p12_unpack import p12_unpack
    from kernels.w2_dequant import w2_dequant, w2_gemv

    h = HIDDEN

    def u8(*shape: int) -> torch.Tensor:
        return torch.empty(*shape, dtype=torch.uint8, device="cuda")

    def bf16(*shape: int) -> torch.Tensor:
        return torch.empty(*shape, dtype=torch.bfloat16, device="cuda")

    def p12_args(numel: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        return (
            u8(payload_nbytes(numel)),
            u8(TABLE_SIZE),
            torch.empty(0, dtype=torch.int64, device="cuda"),
            bf16(0),
        )

    def gemv(rows: int) -> Callable[[], object]:
        return lambda: p12_gemv(bf16(rows, h), *p12_args(h * h), (h, h))

    return [
        ("w2_dequant [4096, 4096]", 0, lambda: w2_dequant(u8(h, h // 4), u8(h, h // 32), h)),
        ("w2_gemv 1 row", 1, lambda: w2_gemv(bf16(1, h), u8(h, h // 4), u8(h, h // 32), h)),
        (
            "nvfp4_dequant [4096, 4096]",
            0,
            lambda: nvfp4_dequant(
                u8(h, h // 2),
                torch.empty(h, h // 16, dtype=torch.float8_e4m3fn, device="cuda"),
                torch.empty(1, device="cuda"),
                h,
            ),
        ),
        ("p12_unpack 4096x4096", 0, lambda: p12_unpack(*p12_args(h * h), h * h)),
        ("p12_gemv 1 row", 1, gemv(1)),
        ("p12_gemv 8-row verify", 8, gemv(8)),
        (
            "p12_embed 8 ids",
            8,
            lambda: p12_gather_rows(
                torch.empty(8, dtype=torch.int64, device="cuda"),
                u8(payload_nbytes(VOCAB * h)),
                u8(TABLE_SIZE),
                VOCAB,
                h,
            ),
        ),
    ]


#: The fused MoE cases: (case name, tokens, with FP4 pool slots). Decode at 1 token and at a
#: k=7 verify step (8 tokens x top-8 = 64 pairs, the decode path's limit), prefill 128, 512.
MOE_CASES = (
    ("moe decode T=1", 1, False),
    ("moe decode T=1 pool", 1, True),
    ("moe decode T=8", 8, False),
    ("moe decode T=8 pool", 8, True),
    ("moe prefill T=128 pool", 128, True),
    ("moe prefill T=512 pool", 512, True),
)
#: The same kernels under expert parallelism (2 ranks, 144 of 288 experts each).
MOE_EP_CASES = (
    ("moe decode T=1 pool ep", 1, True),
    ("moe decode T=8 pool ep", 8, True),
    ("moe prefill T=128 pool ep", 128, True),
)


def record_launches() -> list[Launch]:
    """Every launch of every case, deduplicated by (kernel, arguments, constexprs): e.g. the
    top-k sum kernel specializes the same way at every token count."""
    import os

    from kernels import _triton

    if not _triton.HAVE_TRITON or os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise RuntimeError("the static check needs Triton imported without TRITON_INTERPRET")
    cases: list[tuple[str, int, Callable[[], object]]] = [
        (name, tokens, _moe(tokens, pool)) for name, tokens, pool in MOE_CASES
    ]
    cases += [(name, tokens, _moe(tokens, pool, ep=True)) for name, tokens, pool in MOE_EP_CASES]
    cases += _codecs()
    launches: list[Launch] = []
    for case, tokens, call in cases:
        got: list[Launch] = []
        with _recording(case, tokens, got):
            call()
        if not got:
            raise RuntimeError(f"{case}: the wrapper launched no Triton kernel")
        launches += got
    merged: dict[tuple[object, ...], Launch] = {}
    for launch in launches:  # one compile per specialization; the last case's grid kept
        key = (
            launch.module,
            launch.kernel,
            launch.kwargs,
            tuple((a.dtype, a.value) for a in launch.args),
        )
        first = merged.get(key)
        merged[key] = (
            launch if first is None else replace(launch, case=f"{first.case}; {launch.case}")
        )
    return list(merged.values())
