"""vLLM serves sparkcode checkpoints: the ``w2_quant`` plugin feature.

Unit tests drive the expert method directly; the engine test serves a tiny Qwen3-MoE whose
routed experts are W2 and whose BF16 tensors are P12, through ``sparkcode``'s supervisor and
the OpenAI server, and checks the served log-probabilities against transformers running the
same W2 weights dequantized.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
import torch
import torch.nn.functional as F

from engine.quant import w2
from engine.quant.format import FORMAT_VERSION

HIDDEN, INTER, EXPERTS = 64, 32, 4


def method_and_layer() -> tuple[object, torch.nn.Module]:
    from engine.plugin._w2_moe import W2ExpertsMethod

    moe = SimpleNamespace(
        moe_parallel_config=SimpleNamespace(tp_size=1, use_ep=False), activation="silu")
    method = W2ExpertsMethod(moe)  # type: ignore[arg-type]
    layer = torch.nn.Module()
    method.create_weights(layer, EXPERTS, HIDDEN, INTER, torch.bfloat16)
    return method, layer


def load_experts(
    layer: torch.nn.Module, skip: str | None = None
) -> dict[tuple[int, str], torch.Tensor]:
    """Load random W2 experts through the method's loaders, as vLLM's expert mapping does."""
    g = torch.Generator().manual_seed(0)
    dense: dict[tuple[int, str], torch.Tensor] = {}
    for e in range(EXPERTS):
        for proj, shard, shape in (("gate_proj", "w1", (INTER, HIDDEN)),
                                   ("up_proj", "w3", (INTER, HIDDEN)),
                                   ("down_proj", "w2", (HIDDEN, INTER))):
            q = w2.quantize_rtn(torch.randn(*shape, generator=g) * 0.1)
            dense[e, proj] = q.dequantize(torch.float32)
            param = "w2" if shard == "w2" else "w13"
            for kind, tensor in q.to_state_dict("").items():
                name = f"experts.{e}.{proj}.weight{kind}"
                if name == skip:
                    continue
                p = getattr(layer, f"{param}_weight{kind}")
                assert p.weight_loader(p, tensor, name, shard_id=shard, expert_id=e,
                                       return_success=True)
    return dense


def test_apply_matches_dense_experts_on_the_routed_tokens() -> None:
    method, layer = method_and_layer()
    dense = load_experts(layer)
    method.process_weights_after_loading(layer)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, HIDDEN, generator=g)
    ids = torch.tensor([[0, 2], [2, 3], [1, 0], [3, 3], [2, 1]])
    wts = torch.rand(5, 2, generator=g)
    out = method.apply(layer, x, wts, ids, None, None)
    want = torch.zeros_like(x)
    for t in range(5):
        for k in range(2):
            e = int(ids[t, k])
            h = F.silu(x[t] @ dense[e, "gate_proj"].T) * (x[t] @ dense[e, "up_proj"].T)
            want[t] += wts[t, k] * (h @ dense[e, "down_proj"].T)
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-4)


def test_a_missing_expert_tensor_is_named_after_loading() -> None:
    method, layer = method_and_layer()
    load_experts(layer, skip="experts.2.up_proj.weight_scale")
    with pytest.raises(ValueError, match=r"no experts\.2\.up_proj\.weight_scale"):
        method.process_weights_after_loading(layer)


def test_a_wrong_expert_shape_is_refused_with_its_name() -> None:
    _, layer = method_and_layer()
    p = layer.w13_weight_shape
    with pytest.raises(ValueError, match=r"gate_proj.weight_shape: expert 1 is \(64, 64\)"):
        p.weight_loader(p, torch.tensor([64, 64]), "experts.1.gate_proj.weight_shape",
                        shard_id="w1", expert_id=1)


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

    source = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
              "weight_block_size": [128, 128], "modules_to_not_convert": ["eh_proj"]}
    cfg = SparkcodeW2Config.from_config({
        "format_version": FORMAT_VERSION, "routed_experts": {"bits": 2, "group_size": 32},
        "source_quantization": source})
    assert isinstance(cfg.source, Fp8Config)
    assert cfg.source.weight_block_size == [128, 128] and cfg.source.ignored_layers == ["eh_proj"]
    plain = SparkcodeW2Config.from_config({
        "format_version": FORMAT_VERSION, "routed_experts": {"bits": 2, "group_size": 32}})
    assert plain.source is None


@pytest.mark.engine
def test_vllm_serves_a_w2_checkpoint(tmp_path: Path) -> None:
    from tests.support.engine import run_engine
    from tests.support.tiny_models import write_profile
    from tests.support.w2_models import EXPERT, build_w2_qwen3_moe, reference_logprobs

    model = build_w2_qwen3_moe(tmp_path / "model")
    home = tmp_path / "home"
    write_profile(home / "config", "tiny-w2", model.path, 8400,
                  extra='[plugin]\nenabled = true\nfeatures = ["w2_quant"]\n')
    ids = [1, *range(40, 80)]
    with run_engine(home, "tiny-w2") as eng:
        r = httpx.post(f"{eng.base_url}/completions", timeout=120, json={
            "model": eng.model, "prompt": ids, "max_tokens": 1, "temperature": 0,
            "prompt_logprobs": 0})
        r.raise_for_status()
        log_path = eng.supervisor.log_path()
        assert log_path is not None
        log = log_path.read_text(encoding="utf-8", errors="replace")
    prompt_logprobs = r.json()["choices"][0]["prompt_logprobs"]
    served = torch.tensor([prompt_logprobs[i][str(ids[i])]["logprob"] for i in range(1, len(ids))])
    assert "[sparkcode-plugin] w2_quant: applied" in log
    n_bf16 = sum(t.dtype == torch.bfloat16 and not EXPERT.search(n)
                 for n, t in model.original.items())
    assert f"w2_quant: loaded ({n_bf16} P12 tensors decoded" in log
    bf16_dir = model.path.parent / "bf16"
    as_quantized = (served - reference_logprobs(bf16_dir, model.dequantized, ids)).abs().mean()
    as_original = (served - reference_logprobs(bf16_dir, model.original, ids)).abs().mean()
    # bf16 serving against an fp32 reference of the same W2 weights: a few hundredths of a nat.
    # Against the unquantized model (what the engine would serve if it ignored the codes or
    # dequantized them wrongly) the 2-bit error is tens of times larger.
    assert as_quantized < 0.1, (as_quantized, as_original)
    assert as_original > 10 * as_quantized, (as_quantized, as_original)
