"""The FP4 hot-expert pool as served: 4-bit copies of a layer's pooled experts, live coverage.

Used by ``engine.plugin._w2_moe`` when the ``fp4_pool`` feature is on. The checkpoint holds
NVFP4 copies (``_fp4*`` tensors, ``docs/quant-format.md`` §5) of the experts that
``quantization_config.fp4_pool.experts`` names; a layer's :class:`ExpertPool` registers one
slot per pooled expert, and vLLM's expert mapping loads the copies into them like any other
expert tensor. A routed token whose expert has a slot is computed from the 4-bit copy.

:class:`LiveCoverage` counts routed tokens and those served at 4 bits across all layers, and
writes the share to the engine log now and then: how well the pool chosen offline matches the
live traffic, the input a live re-selection would act on.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from engine.codecs.nvfp4 import BLOCK, FP4Tensor

from ._expert_load import PROJ_NAMES, SHARDS, check_shape, copy_rows, matrix_shape
from ._registry import MARKER

__all__ = ["ExpertPool", "LiveCoverage", "COVERAGE"]

_KINDS = ("fp4", "fp4_scale", "fp4_global_scale", "fp4_shape")


class ExpertPool:
    """Slots for the FP4 copies of ``experts`` on ``layer`` (registered as parameters)."""

    def __init__(self, layer: Any, experts: list[int], inter: int, hidden: int) -> None:
        self.experts = sorted(set(experts))
        self.slot = {e: i for i, e in enumerate(self.experts)}
        self.inter, self.hidden = inter, hidden
        n = len(self.experts)
        shapes: dict[str, tuple[tuple[int, ...], torch.dtype]] = {
            "w13_weight_fp4": ((n, 2 * inter, hidden // 2), torch.uint8),
            "w13_weight_fp4_scale": ((n, 2 * inter, hidden // BLOCK), torch.float8_e4m3fn),
            "w13_weight_fp4_global_scale": ((n, 2), torch.float32),
            "w13_weight_fp4_shape": ((n, 2, 2), torch.int64),
            "w2_weight_fp4": ((n, hidden, inter // 2), torch.uint8),
            "w2_weight_fp4_scale": ((n, hidden, inter // BLOCK), torch.float8_e4m3fn),
            "w2_weight_fp4_global_scale": ((n, 1), torch.float32),
            "w2_weight_fp4_shape": ((n, 1, 2), torch.int64),
        }
        from vllm.model_executor.utils import set_weight_attrs

        for name, (shape, dtype) in shapes.items():
            param = torch.nn.Parameter(torch.zeros(shape, dtype=dtype), requires_grad=False)
            layer.register_parameter(name, param)
            set_weight_attrs(param, {"weight_loader": self._loader(name)})
        self.loaded = torch.zeros(n, 3, len(_KINDS), dtype=torch.bool)
        self.layer = layer

    def _loader(self, name: str) -> Callable[..., bool]:
        kind = next(i for i, k in reversed(list(enumerate(_KINDS))) if name.endswith(k))

        def load(param: torch.nn.Parameter, loaded_weight: torch.Tensor, weight_name: str,
                 shard_id: str, expert_id: int, return_success: bool = False) -> bool:
            slot = self.slot.get(expert_id)
            if slot is None:
                raise ValueError(
                    f"{weight_name}: expert {expert_id} has an FP4 copy but the checkpoint's "
                    f"fp4_pool does not list it for this layer")
            shard = SHARDS[shard_id]
            half = shard if shard < 2 else 0  # w13's global scales and shapes: one per half
            target = param.data[slot]
            if kind == 3:
                want = matrix_shape(shard, self.inter, self.hidden)
                target[half] = check_shape(loaded_weight, want, weight_name, expert_id)
            elif kind == 2:
                target[half] = loaded_weight.reshape(())
            else:
                copy_rows(target, loaded_weight, shard, self.inter, weight_name, expert_id)
            self.loaded[slot, shard, kind] = True
            return True

        return load

    def missing(self) -> list[str]:
        return [f"experts.{self.experts[s]}.{PROJ_NAMES[p]}.weight_{_KINDS[k]}"
                for s, p, k in (~self.loaded).nonzero().tolist()]

    def weights(self, expert: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``(w13 [2I, H], w2 [H, I])`` of a pooled expert, dequantized from its FP4 copy."""
        s, layer = self.slot[expert], self.layer
        halves = []
        for h in range(2):
            rows = slice(h * self.inter, (h + 1) * self.inter)
            halves.append(FP4Tensor(
                layer.w13_weight_fp4[s, rows], layer.w13_weight_fp4_scale[s, rows],
                layer.w13_weight_fp4_global_scale[s, h].reshape(1),
                (self.inter, self.hidden)).dequantize(dtype))
        w2 = FP4Tensor(layer.w2_weight_fp4[s], layer.w2_weight_fp4_scale[s],
                       layer.w2_weight_fp4_global_scale[s].reshape(1),
                       (self.hidden, self.inter)).dequantize(dtype)
        return torch.cat(halves), w2


class LiveCoverage:
    """Routed tokens and those served at 4 bits, reported every ``interval_s`` of traffic."""

    def __init__(self, interval_s: float = 30.0, experts: int = 0) -> None:
        self.interval_s = interval_s
        self.experts = experts
        self.routed = 0
        self.pooled = 0
        self._last = time.monotonic()

    def record(self, routed: int, pooled: int) -> None:
        self.routed += routed
        self.pooled += pooled
        now = time.monotonic()
        if now - self._last >= self.interval_s:
            self._last = now
            print(self.line(), file=sys.stderr, flush=True)

    @property
    def share(self) -> float:
        return self.pooled / self.routed if self.routed else 0.0

    def line(self) -> str:
        return (f"{MARKER} fp4_pool: active ({self.experts} experts at 4 bits; live coverage "
                f"{100 * self.share:.1f}% of {self.routed} routed tokens)")


#: Seconds of traffic between coverage lines in the engine log (tests set it low).
INTERVAL_ENV = "SPARKCODE_FP4_COVERAGE_INTERVAL_S"

COVERAGE = LiveCoverage(float(os.environ.get(INTERVAL_ENV, "30")))
"""This process's coverage counter (one engine, one worker on the Spark)."""
