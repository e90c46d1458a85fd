"""A ``TorchDispatchMode`` that fails on anything a CUDA graph could not capture.

Inside :class:`NoHostSync` an op that reads a tensor value on the host
(``aten._local_scalar_dense``: ``.item()``, ``int(t)``, ``bool(t)``, ``if t:``), or whose output
shape depends on tensor values (``nonzero``, ``unique``, ``masked_select``, ``bincount``,
boolean-mask indexing, ``repeat_interleave`` with tensor repeats, ...) raises
:class:`HostSyncError`. ``.tolist()``, ``.numpy()`` and ``.item()`` are also patched to
raise, since on CPU tensors the first two read memory without dispatching. Every op that
does run is recorded with its output shapes in ``trace``, so two runs on different routings
can be compared: equal traces mean no shape depended on the data.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten

_FORBIDDEN = {
    aten._local_scalar_dense,
    aten.item,
    aten.nonzero,
    aten.nonzero_static,
    aten.argwhere,
    aten.unique_consecutive,
    aten._unique,
    aten._unique2,
    aten.unique_dim,
    aten.masked_select,
    aten.bincount,
    aten.equal,
    aten.is_nonzero,
    aten.allclose,
    aten.histogram,
    aten.unique_dim_consecutive,
}
_FORBIDDEN_NAMES = {p._qualified_op_name for p in _FORBIDDEN}


class HostSyncError(AssertionError):
    """An op that would sync with the host or give a data-dependent shape ran."""


def _shapes(out: Any) -> tuple[Any, ...]:
    if isinstance(out, torch.Tensor):
        return (tuple(out.shape), str(out.dtype))
    if isinstance(out, (tuple, list)):
        return tuple(_shapes(o) for o in out)
    return (type(out).__name__,)


class NoHostSync(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch leaves it untyped
    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.trace: list[tuple[str, tuple[Any, ...]]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = func.overloadpacket._qualified_op_name
        if name in _FORBIDDEN_NAMES:
            raise HostSyncError(f"{func} reads a tensor on the host or has a data-dependent shape")
        if func is aten.repeat_interleave.Tensor or (
            func is aten.repeat_interleave.self_Tensor and kwargs.get("output_size") is None
        ):
            raise HostSyncError(f"{func} without output_size has a data-dependent shape")
        if func in (aten.index.Tensor, aten.index_put.default, aten.index_put_.default):
            indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
            if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices):
                raise HostSyncError(f"{func} with a boolean mask has a data-dependent shape")
        out = func(*args, **kwargs)
        self.trace.append((str(func), _shapes(out)))
        return out


def _refuse(what: str) -> Any:
    def method(*_args: Any, **_kwargs: Any) -> Any:
        raise HostSyncError(f"Tensor.{what}() reads a tensor on the host")

    return method


@contextmanager
def no_host_sync() -> Iterator[NoHostSync]:
    """Run the body under :class:`NoHostSync`, with ``tolist``/``numpy``/``item`` refused."""
    saved = {name: getattr(torch.Tensor, name) for name in ("tolist", "numpy", "item")}
    for name in saved:
        setattr(torch.Tensor, name, _refuse(name))
    try:
        with NoHostSync() as mode:
            yield mode
    finally:
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)
