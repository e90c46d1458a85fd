"""Live re-selection of the FP4 pool: candidates on the host, swapped into slots between steps.

The checkpoint can hold FP4 copies of more experts than the pool has slots (``sparkcode
quantize --fp4-candidates-gb``; ``quantization_config.fp4_pool.candidates``). Their bytes load
into host memory (:class:`HostCopies`, pinned where there is a GPU). Every
``SPARKCODE_FP4_RESELECT_INTERVAL_S`` (default 10 s), at the start of a model step,
:class:`LiveReselection` reads each layer's device counters (``expert_tokens``), feeds the new
counts to that layer's ``engine.codecs.hotpool.HotPoolSelector`` (decay and hysteresis, so noise
does not churn), and applies its changes with ``ExpertPool.swap``: the chosen expert's FP4
bytes are copied into the evicted expert's slot and the expert->slot table is updated in
place. Slots and table keep their addresses, so captured CUDA graphs stay valid; an evicted
expert's bytes are kept on the host first, so it can come back.

Several ranks (tensor or expert parallelism): each worker process has its own pool (its part
of each pooled expert's width, or its own experts), and a wall clock would fire on different
steps on different ranks. So there the check runs every ``SPARKCODE_FP4_RESELECT_STEPS``
model steps (default 256; every rank runs every step) and the counts are all-reduced over the
tensor-parallel group (gloo, host tensors; one collective per check) in global expert ids,
one row per layer that the checkpoint gives candidates, whether or not this rank holds any:
so the ranks call the collective with the same shape at the same step, and from the same
counts every rank of a tensor-parallel layer takes the same decision (no rank swaps alone);
under expert parallelism each rank decides for its own experts from the same global counts.

The hook is ``Worker.execute_model`` of vLLM 0.32's V1 worker (``vllm.v1.worker.gpu_worker``,
which the CPU worker inherits): it runs once per scheduled step in the process that holds the
model, between one step's forward and the next, never inside a CUDA graph capture (those run
from ``compile_or_warm_up_model``). Each swap batch is one line in the engine log.
"""

from __future__ import annotations

import functools
import os
import sys
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from engine.codecs.hotpool import HotPoolSelector, PoolChange

from ._expert_load import PROJ_NAMES
from ._registry import FEATURE_MARK, MARKER

__all__ = [
    "RESELECT",
    "HostCopies",
    "LiveReselection",
    "global_ids",
    "install_step_hook",
    "tp_group_reduce",
]

#: Names of the slot tensors a candidate has on the host (``_fp4_pool.SLOT_TENSORS``).
_SLOT_TENSORS = (
    "w13_weight_fp4",
    "w13_weight_fp4_scale",
    "w13_weight_fp4_global_scale",
    "w2_weight_fp4",
    "w2_weight_fp4_scale",
    "w2_weight_fp4_global_scale",
)
_KINDS = ("fp4", "fp4_scale", "fp4_global_scale", "fp4_shape")


class HostCopies:
    """FP4 bytes of a layer's candidate experts, in host memory, one slot's worth each."""

    def __init__(self, experts: list[int]) -> None:
        self.experts = sorted(set(experts))
        self._tensors: dict[int, dict[str, torch.Tensor]] = {}
        self._loaded: dict[int, torch.Tensor] = {
            e: torch.zeros(3, len(_KINDS), dtype=torch.bool) for e in self.experts
        }

    def __contains__(self, expert: object) -> bool:
        return expert in self._tensors or expert in self._loaded

    def target(self, expert: int, name: str, slots: torch.Tensor) -> torch.Tensor:
        """Where the loader writes ``expert``'s part of the slot tensor ``name`` (like one row
        of ``slots``); allocated on first use."""
        per = self._tensors.setdefault(expert, {})
        if name not in per:
            per[name] = torch.zeros(
                slots.shape[1:], dtype=slots.dtype, pin_memory=torch.cuda.is_available()
            )
        return per[name]

    def mark(self, expert: int, shard: int, kind: int) -> None:
        self._loaded[expert][shard, kind] = True

    def missing(self) -> list[str]:
        return [
            f"experts.{e}.{PROJ_NAMES[p]}.weight_{_KINDS[k]}"
            for e, done in self._loaded.items()
            for p, k in (~done).nonzero().tolist()
        ]

    def has(self, expert: int) -> bool:
        per = self._tensors.get(expert, {})
        return all(name in per for name in _SLOT_TENSORS)

    def keep(self, expert: int, layer: Any, slot: int) -> None:
        """Copy ``slot``'s bytes (``expert``'s) to the host before the slot is reused."""
        self._tensors[expert] = {
            name: getattr(layer, name).data[slot].to("cpu").pin_memory()
            if torch.cuda.is_available()
            else getattr(layer, name).data[slot].to("cpu").clone()
            for name in _SLOT_TENSORS
        }

    def tensors(self, expert: int) -> dict[str, torch.Tensor]:
        return {name: self._tensors[expert][name] for name in _SLOT_TENSORS}

    @property
    def nbytes(self) -> int:
        return sum(
            t.numel() * t.element_size() for per in self._tensors.values() for t in per.values()
        )


Reduce = Callable[[torch.Tensor], torch.Tensor]
"""Sums a host tensor over the ranks (in place) and returns it."""


@dataclass
class _Layer:
    index: int
    ref: weakref.ref[Any]
    selector: HotPoolSelector | None  # None: this rank holds none of the layer's candidates
    available: torch.Tensor  # float64 [E]: 1 where FP4 bytes exist (slot or host)
    seen: torch.Tensor  # float64 [E]: counters at the last read
    global_ids: torch.Tensor  # int64 [E]: each local expert's global id
    global_experts: int


def global_ids(layer: Any) -> tuple[torch.Tensor, int]:
    """``(global id of each local expert, number of global experts)`` of a MoE layer: vLLM's
    ``expert_map`` inverted under expert parallelism, the identity otherwise."""
    local = int(layer.expert_slot.shape[0])
    emap = getattr(layer, "expert_map", None)
    if emap is None:
        return torch.arange(local, dtype=torch.int64), local
    emap = emap.detach().to("cpu", torch.int64)
    ids = torch.full((local,), -1, dtype=torch.int64)
    held = emap >= 0
    ids[emap[held]] = torch.arange(int(emap.numel()), dtype=torch.int64)[held]
    return ids, int(emap.numel())


def tp_group_reduce() -> Reduce | None:
    """A sum over vLLM's tensor-parallel group (its gloo group), or None on one rank."""
    try:
        from vllm.distributed import parallel_state

        if not parallel_state.model_parallel_is_initialized():  # type: ignore[no-untyped-call]
            return None
        group = parallel_state.get_tp_group()
    except Exception:  # noqa: BLE001 - no distributed state: one rank
        return None
    if group.world_size <= 1:
        return None

    def reduce(t: torch.Tensor) -> torch.Tensor:
        torch.distributed.all_reduce(t, group=group.cpu_group)
        return t

    return reduce


@dataclass
class LiveReselection:
    """This process's live re-selection over every MoE layer that has candidates."""

    interval_s: float = 10.0
    hysteresis: float = 0.1
    decay: float = 0.9
    max_swaps: int = 4  # per layer and check
    swaps: int = 0
    checks: int = 0
    last: tuple[int, int, int] | None = None  # (layer, expert in, expert out)
    layers: list[_Layer] = field(default_factory=list)
    every_steps: int = 256  # with several ranks: check every this many steps
    #: sums counts over the ranks; resolved at the first step (None: one rank)
    reduce: Reduce | None = None
    _resolved: bool = False
    _steps: int = 0
    _next: float = 0.0
    _failed: bool = False

    @classmethod
    def from_env(cls) -> LiveReselection:
        env = os.environ.get
        return cls(
            interval_s=float(env("SPARKCODE_FP4_RESELECT_INTERVAL_S", "10")),
            hysteresis=float(env("SPARKCODE_FP4_RESELECT_HYSTERESIS", "0.1")),
            every_steps=max(1, int(env("SPARKCODE_FP4_RESELECT_STEPS", "256"))),
        )

    def register(self, index: int, layer: Any) -> None:
        """Re-choose ``layer``'s pool (``layer.w2q_pool`` with host candidates) from now on.

        With several ranks every rank registers every layer the checkpoint gives candidates,
        in the same order; a layer whose candidates all live on other ranks only takes part
        in the all-reduce."""
        pool = layer.w2q_pool
        experts = int(layer.expert_slot.shape[0])
        ids, total = global_ids(layer)
        available = torch.zeros(experts, dtype=torch.float64)
        selector = None
        if pool is not None and pool.host.experts:
            available[pool.experts + pool.host.experts] = 1.0
            size = sum(
                int(getattr(layer, n)[0].numel()) * getattr(layer, n).element_size()
                for n in _SLOT_TENSORS
            )
            selector = HotPoolSelector(
                budget_bytes=size * len(pool.experts),
                expert_bytes=size,
                hysteresis=self.hysteresis,
                decay=self.decay,
                max_swaps=self.max_swaps,
                initial={(0, e) for e in pool.experts},
            )
        self.layers.append(
            _Layer(
                index,
                weakref.ref(layer),
                selector,
                available,
                torch.zeros(experts, dtype=torch.float64),
                ids,
                total,
            )
        )
        install_step_hook()

    def due(self, now: float | None = None) -> bool:
        """Whether this step checks: every ``every_steps`` steps with several ranks (the same
        steps on each), else once ``interval_s`` passed."""
        if not self._resolved:
            self._resolved = True
            if self.reduce is None:
                self.reduce = tp_group_reduce()
        if self.reduce is not None:
            self._steps += 1
            return self._steps % self.every_steps == 0
        now = time.monotonic() if now is None else now
        if now < self._next:
            return False
        self._next = now + self.interval_s
        return True

    def step(self, now: float | None = None) -> int:
        """Between steps: if a check is due, re-choose and swap; returns swaps made."""
        if not self.layers or self._failed or not self.due(now):
            return 0
        try:
            made = self._check_all()
        except Exception as exc:  # noqa: BLE001 - the engine must keep serving
            self._failed = True
            print(
                f"{MARKER} fp4_reselect: failed ({type(exc).__name__}: {exc}); the pool "
                "stays as it is",
                file=sys.stderr,
                flush=True,
            )
            return 0
        self.checks += 1
        if made:
            if torch.cuda.is_available():
                torch.cuda.synchronize()  # the copies land before any stream's next step
            print(self.line(), file=sys.stderr, flush=True)
        return made

    def _check_all(self) -> int:
        """Read every layer's counters (the one host read), sum them over the ranks in global
        expert ids, and let each layer's selector decide from the sums."""
        rows = []
        for entry in self.layers:
            layer = entry.ref()
            row = torch.zeros(entry.global_experts, dtype=torch.float64)
            if layer is not None:
                counts = layer.expert_tokens.detach().to("cpu", torch.float64)
                row[entry.global_ids] = counts - entry.seen
                entry.seen = counts
            rows.append(row)
        total = torch.cat(rows)
        if self.reduce is not None:
            total = self.reduce(total)
        made, start = 0, 0
        for entry, row in zip(self.layers, rows, strict=True):
            summed = total[start : start + row.numel()]
            start += row.numel()
            layer = entry.ref()
            if layer is None or entry.selector is None:
                continue
            delta = summed[entry.global_ids]
            if not bool((delta > 0).any()):
                continue
            entry.selector.observe((delta * entry.available).reshape(1, -1))
            made += self._apply(layer, entry, entry.selector.reselect())
        return made

    def _apply(self, layer: Any, entry: _Layer, change: PoolChange) -> int:
        pool = layer.w2q_pool
        outgoing = sorted(e for _, e in change.remove)
        incoming = sorted(e for _, e in change.add)
        if len(outgoing) != len(incoming):  # equal sizes and full slots: cannot happen
            raise RuntimeError(
                f"layer {entry.index}: selector changed the pool size "
                f"({incoming} in, {outgoing} out)"
            )
        for out_e, in_e in zip(outgoing, incoming, strict=True):
            slot = pool.slot[out_e]
            if not pool.host.has(out_e):
                pool.host.keep(out_e, layer, slot)
            pool.swap(slot, in_e, pool.host.tensors(in_e))
            self.swaps += 1
            self.last = (entry.index, in_e, out_e)
        return len(incoming)

    def line(self) -> str:
        hosts = [
            layer.w2q_pool.host
            for e in self.layers
            if (layer := e.ref()) is not None and layer.w2q_pool is not None
        ]
        gib = sum(h.nbytes for h in hosts) / 2**30
        cands = sum(len(h.experts) for h in hosts)
        last = ""
        if self.last is not None:
            layer, inc, out = self.last
            last = f"; last: layer {layer} expert {inc} in, expert {out} out"
        return (
            f"{MARKER} fp4_reselect: live ({self.swaps} swaps in {self.checks} checks"
            f"{last}; {cands} candidates, {gib:.2f} GiB on the host)"
        )


RESELECT = LiveReselection.from_env()
"""This process's re-selection (one engine, one worker on the Spark)."""


def install_step_hook() -> bool:
    """Run :data:`RESELECT` before every ``Worker.execute_model``; once per process."""
    from vllm.v1.worker.gpu_worker import Worker

    current = Worker.execute_model
    if getattr(current, FEATURE_MARK, None) == "fp4_reselect":
        return False

    @functools.wraps(current)
    def execute_model(self: Any, *args: Any, **kwargs: Any) -> Any:
        with torch.inference_mode():  # the slots may be inference tensors after loading
            RESELECT.step()
        return current(self, *args, **kwargs)

    setattr(execute_model, FEATURE_MARK, "fp4_reselect")
    Worker.execute_model = execute_model  # type: ignore[method-assign]
    return True
