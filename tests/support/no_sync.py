"""A dispatch mode that fails on any op that reads a tensor value on the host.

CUDA graphs replay fixed kernels on fixed addresses: a forward that copies a value to the host
(``.item()``, ``.tolist()``, ``int(t)``) or whose output shape depends on tensor values
(``nonzero``, ``unique``, boolean indexing, ``bincount``) stalls every step and cannot be
captured. Running the CPU reference path under :class:`NoHostSync` proves it does neither.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten

_FORBIDDEN = {
    aten._local_scalar_dense, aten.item, aten.nonzero, aten.nonzero_static, aten.argwhere,
    aten.masked_select, aten.unique_dim, aten._unique, aten._unique2, aten.unique_consecutive,
    aten.unique_dim_consecutive, aten.bincount, aten.repeat_interleave, aten.equal,
    aten.is_nonzero,
}


class HostSyncError(AssertionError):
    """An op read a tensor value on the host or produced a data-dependent shape."""


class NoHostSync(TorchDispatchMode):
    """Raise :class:`HostSyncError` on the ops above and on indexing with a boolean mask."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        packet = getattr(func, "overloadpacket", func)
        if packet in _FORBIDDEN:
            raise HostSyncError(f"{func} reads tensor values on the host")
        if packet in (aten.index, aten.index_put, aten.index_put_):
            indices = args[1] if len(args) > 1 else ()
            if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices):
                raise HostSyncError(f"{func} with a boolean mask has a data-dependent shape")
        return func(*args, **(kwargs or {}))
