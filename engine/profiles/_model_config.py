"""What a model directory's ``config.json`` says that starting it depends on: whether
the model is hybrid (linear-attention layers beside full attention) and its context.
Read by the command renderer and the prefix-cache page math (``engine.pagemath``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_model_config(model_dir: Path) -> dict[str, Any] | None:
    """The model's ``config.json`` as a dict, or None where it is missing or not JSON."""
    try:
        data = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's part of a config (a multimodal one nests it)."""
    text = config.get("text_config")
    return text if isinstance(text, dict) else config


def is_hybrid_config(config: dict[str, Any]) -> bool:
    """Whether a HF config describes linear-attention (Mamba-family) layers."""
    text = text_config(config)
    layer_types = text.get("layer_types") or []
    return bool(
        text.get("linear_attn_config")
        or any(t in ("linear_attention", "mamba") for t in layer_types)
        or text.get("model_type") in ("mamba", "mamba2")
    )


def is_int8_compressed_config(config: dict[str, Any]) -> bool:
    """Whether a HF config declares compressed-tensors int8 weights (the W8A8 copies of
    :mod:`engine.w8a8`, and others written the same way)."""
    quant = config.get("quantization_config")
    if not isinstance(quant, dict) or quant.get("quant_method") != "compressed-tensors":
        return False
    groups = quant.get("config_groups")
    if not isinstance(groups, dict):
        return False
    return any(
        isinstance(group, dict)
        and isinstance(group.get("weights"), dict)
        and group["weights"].get("type") == "int"
        and group["weights"].get("num_bits") == 8
        for group in groups.values()
    )


def model_context(config: dict[str, Any]) -> int | None:
    """The model's own context length (``max_position_embeddings``), if it says one."""
    value = text_config(config).get("max_position_embeddings")
    return value if isinstance(value, int) and value > 0 else None
