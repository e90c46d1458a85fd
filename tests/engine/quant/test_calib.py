"""Calibration: the capture hook, the activation file format, routing and Hessians."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from engine.quant.calib import (
    ActivationCapture,
    CalibrationError,
    CalibrationFile,
    LayerCalibration,
    down_inputs,
    is_moe_block,
    route,
    save_calibration,
)
from engine.quant.gptq import HessianAccumulator


def test_file_round_trip(tmp_path: Path) -> None:
    inputs = {3: torch.randn(40, 64), 7: torch.randn(12, 64)}
    counts = {3: torch.tensor([5, 0, 9, 1])}
    path = tmp_path / "c.safetensors"
    save_calibration(path, inputs, counts=counts, source="unit test")
    calib = CalibrationFile(path)
    assert calib.layers == [3, 7]
    assert calib.hidden_size == 64
    assert calib.metadata["source"] == "unit test"
    x = calib.inputs(3)
    assert x is not None and x.dtype == torch.bfloat16
    assert torch.equal(x, inputs[3].to(torch.bfloat16))
    assert calib.inputs(5) is None
    c = calib.counts(3)
    assert c is not None and c.tolist() == [5, 0, 9, 1]
    assert calib.counts(7) is None


def test_bad_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(CalibrationError, match="does not exist"):
        CalibrationFile(tmp_path / "nope.safetensors")
    other = tmp_path / "other.safetensors"
    save_file({"x": torch.zeros(2)}, str(other))
    with pytest.raises(CalibrationError, match="not a sparkcode calibration file"):
        CalibrationFile(other)
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"garbage")
    with pytest.raises(CalibrationError, match="not readable"):
        CalibrationFile(junk)
    with pytest.raises(CalibrationError, match="no activations"):
        save_calibration(tmp_path / "empty.safetensors", {})


def _tiny_moe() -> Any:
    """A two-layer Qwen3-MoE (``Any``: transformers' model classes are untyped)."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(0)
    fields: dict[str, Any] = dict(  # head_dim is a config kwarg the signature does not list
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        num_experts=4,
        num_experts_per_tok=2,
        mlp_only_layers=[0],
    )
    model: Any = Qwen3MoeForCausalLM(Qwen3MoeConfig(**fields))  # type: ignore[no-untyped-call]
    return model.eval()


def test_capture_hook_records_moe_inputs(tmp_path: Path) -> None:
    model = _tiny_moe()
    capture = ActivationCapture(max_tokens=20, layer_filter=is_moe_block)
    assert capture.attach(model) == 1  # layer 0 is a dense MLP
    seen: list[torch.Tensor] = []
    norm = model.model.layers[1].post_attention_layernorm
    handle = norm.register_forward_hook(lambda _m, _i, out: seen.append(out.detach()))
    ids = torch.randint(0, 128, (2, 8))
    with torch.no_grad():
        model(ids)
        model(ids[:, :6])
    handle.remove()
    captured = capture.inputs()
    assert list(captured) == [1]
    # The MoE block's input is the post-attention norm's output, flattened to rows.
    expected = torch.cat([s.reshape(-1, 64) for s in seen])[:20].to(torch.bfloat16)
    assert torch.equal(captured[1], expected)  # and capped at max_tokens
    capture.detach()
    with torch.no_grad():
        model(ids)
    assert capture.inputs()[1].shape[0] == 20  # detached: nothing more recorded
    capture.save(tmp_path / "c.safetensors", source="tiny qwen3-moe")
    assert CalibrationFile(tmp_path / "c.safetensors").layers == [1]


def test_route_is_sigmoid_topk_with_bias() -> None:
    x = torch.randn(30, 16)
    router = torch.randn(6, 16)
    bias = torch.zeros(6)
    bias[5] = 10.0  # a correction bias that always wins selection
    ids = route(x, router, bias, 2)
    assert ids.shape == (30, 2)
    assert bool((ids == 5).any(dim=-1).all())
    plain = route(x, router, None, 2)
    assert torch.equal(
        plain.sort(-1).values, torch.topk(x @ router.t(), 2, dim=-1).indices.sort(-1).values
    )


def test_down_inputs_apply_the_swiglu_clamp() -> None:
    x = torch.randn(5, 8) * 100
    g, u = torch.randn(3, 8), torch.randn(3, 8)
    clamped = down_inputs(x, g, u, 10.0)
    gate, up = (x @ g.t()).clamp(max=10.0), (x @ u.t()).clamp(-10.0, 10.0)
    assert torch.allclose(clamped, torch.nn.functional.silu(gate) * up)


def _layer(
    fallback: str, min_tokens: int
) -> tuple[LayerCalibration, dict[int, tuple[torch.Tensor, torch.Tensor]]]:
    torch.manual_seed(1)
    x = torch.randn(200, 32)
    router = torch.randn(4, 32)
    bias = torch.tensor([0.0, 0.0, 0.0, -5.0])  # expert 3 is (almost) never chosen
    weights = {e: (torch.randn(16, 32), torch.randn(16, 32)) for e in range(4)}
    calib = LayerCalibration.build(
        0, x, router, bias, 2, min_tokens=min_tokens, fallback=fallback, swiglu_limit=10.0
    )
    return calib, weights


def test_gate_up_share_one_hessian_and_down_is_per_expert() -> None:
    calib, weights = _layer("rtn", 10)
    acc = HessianAccumulator(32)
    acc.add(calib.inputs)
    assert torch.allclose(calib.gate_up_hessian, acc.hessian, atol=1e-4)
    h0, src0 = calib.down_hessian(0, weights.__getitem__, range(4))
    assert src0 == "expert" and h0 is not None
    rows = calib.tokens_for(0)
    assert rows.shape[0] == calib.token_count(0) >= 10
    expected = HessianAccumulator(16)
    expected.add(down_inputs(rows, *weights[0], 10.0))
    assert torch.allclose(h0, expected.hessian, rtol=1e-4, atol=1e-4)


def test_starved_expert_falls_back() -> None:
    calib, weights = _layer("rtn", 10)
    assert calib.token_count(3) < 10
    assert calib.down_hessian(3, weights.__getitem__, range(4)) == (None, "rtn")
    pooled, _ = _layer("pooled", 10)
    h, src = pooled.down_hessian(3, weights.__getitem__, range(4))
    assert src == "pooled" and h is not None and h.shape == (16, 16)
    # The pooled Hessian covers every routed (token, expert) pair of the layer.
    acc = HessianAccumulator(16)
    for e in range(4):
        acc.add(down_inputs(pooled.tokens_for(e), *weights[e], 10.0))
    assert torch.allclose(h, acc.hessian, rtol=1e-4, atol=1e-4)
