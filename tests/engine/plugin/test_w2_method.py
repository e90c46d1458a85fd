"""The ``w2_quant`` plugin feature's expert method, driven directly (no engine).

The engine serving a W2 checkpoint is ``tests/e2e/test_w2_serving.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from engine.codecs.format import FORMAT_VERSION
from tests.support import moe_layers
from tests.support.moe_layers import dense_moe

HIDDEN, INTER, EXPERTS = 64, 32, 4


@pytest.fixture(autouse=True)
def _quiet_coverage(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.plugin import _fp4_pool, _w2_moe

    monkeypatch.setattr(_w2_moe, "COVERAGE", _fp4_pool.LiveCoverage(interval_s=3600))


def method_and_layer(pooled: tuple[int, ...] = ()) -> tuple[Any, Any]:
    return moe_layers.method_and_layer(EXPERTS, HIDDEN, INTER, pooled)


def load_experts(
    layer: Any, skip: str | None = None, pooled: tuple[int, ...] = ()
) -> dict[tuple[int, str], torch.Tensor]:
    return moe_layers.load_experts(layer, EXPERTS, HIDDEN, INTER, pooled=pooled, skip=skip)


def test_apply_matches_dense_experts_on_the_routed_tokens() -> None:
    method, layer = method_and_layer()
    dense = load_experts(layer)
    method.process_weights_after_loading(layer)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, HIDDEN, generator=g)
    ids = torch.tensor([[0, 2], [2, 3], [1, 0], [3, 3], [2, 1]])
    wts = torch.rand(5, 2, generator=g)
    out = method.apply(layer, x, wts, ids, None, None)
    torch.testing.assert_close(out, dense_moe(x, ids, wts, dense), rtol=1e-4, atol=1e-4)


def test_pooled_experts_are_served_from_their_fp4_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.plugin import _fp4_pool, _w2_moe

    coverage = _fp4_pool.LiveCoverage(interval_s=3600)
    monkeypatch.setattr(_w2_moe, "COVERAGE", coverage)
    method, layer = method_and_layer(pooled=(1, 3))
    dense = load_experts(layer, pooled=(1, 3))
    method.process_weights_after_loading(layer)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(6, HIDDEN, generator=g)
    ids = torch.tensor([[0, 1], [3, 2], [1, 3], [0, 2], [2, 1], [3, 0]])
    wts = torch.rand(6, 2, generator=g)
    out = method.apply(layer, x, wts, ids, None, None)
    torch.testing.assert_close(out, dense_moe(x, ids, wts, dense), rtol=1e-4, atol=1e-4)
    assert layer.expert_slot.tolist() == [-1, 0, -1, 1]
    assert layer.expert_tokens.tolist() == [3, 3, 3, 3]  # device counters, no host step
    assert coverage.totals() == (12, 6)  # experts 1 and 3 got 6 of 12 pairs
    assert "2 experts at 4 bits; live coverage 50.0% of 12 routed tokens" in coverage.line()


def test_a_missing_fp4_copy_is_named_after_loading() -> None:
    method, layer = method_and_layer(pooled=(2,))
    load_experts(layer, pooled=(2,), skip="experts.2.down_proj.weight_fp4_scale")
    with pytest.raises(ValueError, match=r"no experts\.2\.down_proj\.weight_fp4_scale"):
        method.process_weights_after_loading(layer)


def test_an_fp4_copy_for_an_unlisted_expert_is_refused() -> None:
    _, layer = method_and_layer(pooled=(2,))
    p = layer.w2_weight_fp4
    with pytest.raises(ValueError, match="fp4_pool does not list it"):
        p.weight_loader(
            p,
            torch.zeros(HIDDEN, INTER // 2, dtype=torch.uint8),
            "experts.0.down_proj.weight_fp4",
            shard_id="w2",
            expert_id=0,
        )


def test_a_missing_expert_tensor_is_named_after_loading() -> None:
    method, layer = method_and_layer()
    load_experts(layer, skip="experts.2.up_proj.weight_scale")
    with pytest.raises(ValueError, match=r"no experts\.2\.up_proj\.weight_scale"):
        method.process_weights_after_loading(layer)


def test_a_wrong_expert_shape_is_refused_with_its_name() -> None:
    _, layer = method_and_layer()
    p = layer.w13_weight_shape
    with pytest.raises(ValueError, match=r"gate_proj.weight_shape: expert 1 is \(64, 64\)"):
        p.weight_loader(
            p,
            torch.tensor([64, 64]),
            "experts.1.gate_proj.weight_shape",
            shard_id="w1",
            expert_id=1,
        )


def test_config_refuses_another_format_version() -> None:
    from engine.plugin._w2_moe import SparkcodeW2Config

    good = {"format_version": FORMAT_VERSION, "routed_experts": {"bits": 2, "group_size": 32}}
    assert SparkcodeW2Config.from_config(good).config is good
    with pytest.raises(ValueError, match="format version 99"):
        SparkcodeW2Config.from_config({**good, "format_version": 99})


def test_non_expert_fp8_weights_go_to_vllms_fp8_method() -> None:
    # A GLM-5.3-Flash output keeps the source's FP8 linears and its quantization_config.
    from vllm.model_executor.layers.quantization.fp8 import Fp8Config

    from engine.plugin._w2_moe import SparkcodeW2Config

    source = {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": "dynamic",
        "weight_block_size": [128, 128],
        "modules_to_not_convert": ["eh_proj"],
    }
    cfg = SparkcodeW2Config.from_config(
        {
            "format_version": FORMAT_VERSION,
            "routed_experts": {"bits": 2, "group_size": 32},
            "source_quantization": source,
        }
    )
    assert isinstance(cfg.source, Fp8Config)
    assert cfg.source.weight_block_size == [128, 128] and cfg.source.ignored_layers == ["eh_proj"]
    plain = SparkcodeW2Config.from_config(
        {"format_version": FORMAT_VERSION, "routed_experts": {"bits": 2, "group_size": 32}}
    )
    assert plain.source is None
