"""The FP4 hot-expert pool as served: fixed slots, a device expert-to-slot table, live counts.

Used by ``engine.plugin._w2_moe`` when the ``fp4_pool`` feature is on. The checkpoint holds
NVFP4 copies (``_fp4*`` tensors, ``docs/quant-format.md`` §5) of the experts that
``quantization_config.fp4_pool.experts`` names; vLLM's expert mapping loads them into the
slots below like any other expert tensor.

Data interface (what the fused MoE kernel reads and what a live swap writes), per MoE layer:

* slot tensors, registered as parameters of the layer (slot ``s`` is row ``s``)::

      w13_weight_fp4               uint8   [S, 2I, H/2]   gate rows, then up rows
      w13_weight_fp4_scale         e4m3    [S, 2I, H/16]
      w13_weight_fp4_global_scale  float32 [S, 2]         gate half, up half
      w2_weight_fp4                uint8   [S, H, I/2]
      w2_weight_fp4_scale          e4m3    [S, H, I/16]
      w2_weight_fp4_global_scale   float32 [S, 1]
      w13_weight_fp4_shape, w2_weight_fp4_shape  int64 (load-time checks only)

* ``layer.expert_slot``: int32 ``[E]`` on the device, the slot of each expert or -1;
* ``layer.expert_tokens``: int64 ``[E]`` on the device, routed (token, expert) pairs per
  expert since load, incremented by the MoE forward with device ops only (no host read);
* :meth:`ExpertPool.swap` ``(slot, expert, tensors)`` copies an expert's FP4 bytes into a
  slot in place and updates ``expert_slot``: the addresses never change, so a captured CUDA
  graph stays valid. Call it between steps (on the stream the model runs on).

:class:`LiveCoverage` sums the layers' counters now and then, off the forward path, and
writes the share served at 4 bits to the engine log (``sparkcode engine status`` shows it).
"""

from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import torch

from engine.codecs.nvfp4 import BLOCK, FP4Tensor

from ._expert_load import PROJ_NAMES, SHARDS, check_shape, copy_rows, matrix_shape
from ._registry import MARKER

__all__ = ["COVERAGE", "ExpertPool", "LiveCoverage", "SLOT_TENSORS"]

_KINDS = ("fp4", "fp4_scale", "fp4_global_scale", "fp4_shape")

#: The slot tensors :meth:`ExpertPool.swap` takes, by parameter name (without the slot row).
SLOT_TENSORS = (
    "w13_weight_fp4",
    "w13_weight_fp4_scale",
    "w13_weight_fp4_global_scale",
    "w2_weight_fp4",
    "w2_weight_fp4_scale",
    "w2_weight_fp4_global_scale",
)


class ExpertPool:
    """FP4 slots for ``experts`` on ``layer`` (one slot each), and the layer's slot table."""

    def __init__(
        self,
        layer: Any,
        experts: list[int],
        inter: int,
        hidden: int,
        num_experts: int,
        candidates: list[int] | None = None,
        to_local: Callable[[int], int] | None = None,
        tp: tuple[int, int] = (0, 1),
    ) -> None:
        """``experts`` and ``candidates`` are the checkpoint's (global) ids; under expert
        parallelism ``to_local`` maps them to this rank's (all must be local), and slots and
        the table are indexed by local ids. Under tensor parallelism ``tp = (rank, size)`` and
        ``inter`` is this rank's share: the loaders narrow the FP4 copies as the W2 codes."""
        from ._pool_live import HostCopies

        self.to_local = to_local or (lambda e: e)
        self.tp = tp
        local = [self.to_local(e) for e in experts]
        local_candidates = [self.to_local(e) for e in candidates or []]
        self.experts = sorted(set(local))  # slot -> expert (host mirror of the table)
        if any(not 0 <= e < num_experts for e in [*self.experts, *local_candidates]):
            raise ValueError(
                f"fp4_pool lists experts {sorted(set(experts))} (candidates "
                f"{candidates or []}) for a layer of {num_experts} experts"
            )
        candidates = local_candidates
        self.global_of = dict(zip(local, experts, strict=True))  # for the checkpoint's names
        #: FP4 copies of candidates beyond the slots, kept on the host for live swaps.
        self.host = HostCopies([e for e in candidates or [] if e not in self.experts])
        self.slot = {e: i for i, e in enumerate(self.experts)}  # expert -> slot
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
        table = torch.full((num_experts,), -1, dtype=torch.int32)
        table[self.experts] = torch.arange(n, dtype=torch.int32)
        layer.expert_slot.copy_(table)
        self.loaded = torch.zeros(n, 3, len(_KINDS), dtype=torch.bool)
        self.layer = layer

    @property
    def table(self) -> torch.Tensor:
        """``expert_slot``: int32 ``[E]``, the slot of each expert or -1 (on the device)."""
        t: torch.Tensor = self.layer.expert_slot
        return t

    @property
    def counts(self) -> torch.Tensor:
        """``expert_tokens``: int64 ``[E]`` routed pairs per expert (on the device)."""
        t: torch.Tensor = self.layer.expert_tokens
        return t

    def _loader(self, name: str) -> Callable[..., bool]:
        kind = next(i for i, k in reversed(list(enumerate(_KINDS))) if name.endswith(k))

        def load(
            param: torch.nn.Parameter,
            loaded_weight: torch.Tensor,
            weight_name: str,
            shard_id: str,
            expert_id: int,
            return_success: bool = False,
        ) -> bool:
            local = self.to_local(expert_id)
            if local < 0:
                return False  # another rank's expert (expert parallelism)
            slot = self.slot.get(local)
            if slot is None and local not in self.host:
                raise ValueError(
                    f"{weight_name}: expert {expert_id} has an FP4 copy but the checkpoint's "
                    f"fp4_pool does not list it for this layer"
                )
            shard = SHARDS[shard_id]
            half = shard if shard < 2 else 0  # w13's global scales and shapes: one per half
            if slot is None:  # a candidate: its bytes wait on the host for a live swap
                target = (
                    param.data[0].clone()
                    if kind == 3
                    else self.host.target(local, name, param.data)
                )
                self.host.mark(local, shard, kind)
            else:
                target = param.data[slot]
            if kind == 3:  # the checkpoint's whole matrix
                want = matrix_shape(shard, self.inter * self.tp[1], self.hidden)
                target[half] = check_shape(loaded_weight, want, weight_name, expert_id)
            elif kind == 2:  # one global scale per matrix: every rank's part shares it
                target[half] = loaded_weight.reshape(())
            else:
                copy_rows(target, loaded_weight, shard, self.inter, weight_name, expert_id, self.tp)
            if slot is not None:
                self.loaded[slot, shard, kind] = True
            return True

        return load

    def missing(self) -> list[str]:
        name = self.global_of.get
        return [
            f"experts.{name(self.experts[s], self.experts[s])}.{PROJ_NAMES[p]}.weight_{_KINDS[k]}"
            for s, p, k in (~self.loaded).nonzero().tolist()
        ] + self.host.missing()

    @staticmethod
    def expert_tensors(gate: FP4Tensor, up: FP4Tensor, down: FP4Tensor) -> dict[str, torch.Tensor]:
        """The :data:`SLOT_TENSORS` of one expert from its three NVFP4 matrices (checkpoint
        form, e.g. ``FP4Tensor.from_state_dict``), ready for :meth:`swap`."""
        return {
            "w13_weight_fp4": torch.cat([gate.packed, up.packed]),
            "w13_weight_fp4_scale": torch.cat([gate.scales, up.scales]),
            "w13_weight_fp4_global_scale": torch.cat(
                [gate.global_scale.reshape(1), up.global_scale.reshape(1)]
            ).float(),
            "w2_weight_fp4": down.packed,
            "w2_weight_fp4_scale": down.scales,
            "w2_weight_fp4_global_scale": down.global_scale.reshape(1).float(),
        }

    def swap(self, slot: int, expert: int, tensors: Mapping[str, torch.Tensor]) -> int | None:
        """Serve ``expert`` from ``slot``: copy its FP4 bytes in place, update the table.

        ``tensors`` holds every name of :data:`SLOT_TENSORS` with that tensor's shape minus
        the slot dimension (:meth:`expert_tensors` builds it). Nothing is reallocated, so
        captured CUDA graphs keep reading the right memory; only device copies are issued (no
        host sync). Returns the expert the slot served before (now back on its W2 codes), or
        None if the slot held the same expert. Raises ValueError, changing nothing, on a bad
        slot, an expert already in another slot, or a tensor of the wrong shape or dtype.
        """
        layer = self.layer
        if not 0 <= slot < len(self.experts):
            raise ValueError(f"slot {slot} is not one of this pool's {len(self.experts)} slots")
        num_experts = int(layer.expert_slot.shape[0])
        if not 0 <= expert < num_experts:
            raise ValueError(f"expert {expert} is not one of this layer's {num_experts}")
        held = self.slot.get(expert)
        if held is not None and held != slot:
            raise ValueError(f"expert {expert} is already served from slot {held}")
        for name in SLOT_TENSORS:
            if name not in tensors:
                raise ValueError(f"swap needs {name}")
            want = getattr(layer, name)
            got = tensors[name]
            if tuple(got.shape) != tuple(want.shape[1:]) or got.dtype != want.dtype:
                raise ValueError(
                    f"{name}: expected {want.dtype} {tuple(want.shape[1:])}, got "
                    f"{got.dtype} {tuple(got.shape)}"
                )
        previous = self.experts[slot]
        # The table first stops routing the old expert here, then the bytes change, then it
        # routes the new one here; all on one stream, so a step sees one state or the other.
        layer.expert_slot[previous] = -1
        for name in SLOT_TENSORS:
            getattr(layer, name).data[slot].copy_(tensors[name], non_blocking=True)
        layer.expert_slot[expert] = slot
        del self.slot[previous]
        self.slot[expert] = slot
        self.experts[slot] = expert
        return None if previous == expert else previous


class LiveCoverage:
    """Routed pairs and those served at 4 bits, summed over the registered layers' device
    counters and reported every ``interval_s`` by a background thread (never per step)."""

    def __init__(self, interval_s: float = 30.0) -> None:
        self.interval_s = interval_s
        self.experts = 0  # pooled experts, all layers
        self._layers: list[weakref.ref[Any]] = []
        self._thread: threading.Thread | None = None
        self._last_routed = -1
        self._on_cuda = False
        self._started = time.monotonic()
        #: monotonic time until which a CUDA graph capture may be running (no reads then).
        self.capture_seen = 0.0

    def register(self, layer: Any, pooled: int) -> None:
        """Count ``layer``'s ``expert_tokens`` (and its ``expert_slot``) from now on."""
        self._layers.append(weakref.ref(layer))
        self.experts += pooled
        self._on_cuda |= bool(layer.expert_tokens.is_cuda)

    def may_read(self) -> bool:
        """Whether reading CUDA counters is safe now. A read from this thread while another
        captures a CUDA graph would break the capture (vLLM captures in global mode), so on
        CUDA reads wait until captures were seen and ended; an engine that captured nothing
        for 10 minutes after loading runs eagerly."""
        if not self._on_cuda:
            return True
        now = time.monotonic()
        if self.capture_seen:
            return now > self.capture_seen
        return now - self._started > 600.0

    def totals(self) -> tuple[int, int]:
        """``(routed, pooled)`` pairs so far: reads the device counters (a host sync)."""
        routed = pooled = 0
        for ref in self._layers:
            layer = ref()
            if layer is None:
                continue
            counts = layer.expert_tokens.detach().to("cpu")
            served = layer.expert_slot.detach().to("cpu") >= 0
            routed += int(counts.sum())
            pooled += int(counts[served].sum())
        return routed, pooled

    def line(self) -> str:
        routed, pooled = self.totals()
        share = pooled / routed if routed else 0.0
        return (
            f"{MARKER} fp4_pool: active ({self.experts} experts at 4 bits; live coverage "
            f"{100 * share:.1f}% of {routed} routed tokens)"
        )

    def report(self) -> None:
        """Write :meth:`line` to the log if the counts moved since the last line."""
        if not self.may_read():
            return
        routed, _ = self.totals()
        if routed != self._last_routed:
            self._last_routed = routed
            print(self.line(), file=sys.stderr, flush=True)

    def start(self) -> None:
        """Start the reporting thread once (a daemon: it dies with the worker)."""
        if self._thread is not None or not self.experts:
            return
        self._started = time.monotonic()  # weights are loaded; captures, if any, come next

        def run() -> None:
            while True:
                time.sleep(max(self.interval_s, 0.25))
                try:
                    self.report()
                except Exception as exc:  # a dead engine or torn-down model: stop quietly
                    print(
                        f"{MARKER} fp4_pool: coverage reporting stopped ({exc})",
                        file=sys.stderr,
                        flush=True,
                    )
                    return

        self._thread = threading.Thread(target=run, name="sparkcode-fp4-coverage", daemon=True)
        self._thread.start()


#: Seconds of traffic between coverage lines in the engine log (tests set it low).
INTERVAL_ENV = "SPARKCODE_FP4_COVERAGE_INTERVAL_S"

COVERAGE = LiveCoverage(float(os.environ.get(INTERVAL_ENV, "30")))
"""This process's coverage counter (one engine, one worker on the Spark)."""
