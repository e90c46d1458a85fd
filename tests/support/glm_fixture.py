"""A tiny GLM-5.3-Flash-shaped block-FP8 checkpoint, generated on the fly.

Real tensor names, dtypes and the 128x128 FP8 scale layout of the official
checkpoint (see ``shared/notes/glm53-flash.md``), with small widths:

* layer 0: KDA attention + dense MLP (FP8);
* layers 1, 2: KDA + MoE (router BF16/F32, 4 routed FP8 experts, FP8 shared expert);
* layer 3: MLA + DSA indexer + MoE;
* layer 4: the MTP layer (enorm/hnorm/eh_proj/shared_head + MLA + MoE, no mHC).

Widths are chosen so FP8 scale grids have partial blocks (160 and 384 are not
multiples of 128). Tensors are spread over three shards, and one expert's scale
lives in a different shard from its weight, as the index allows.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

HIDDEN = 256
MOE_INTER = 160
DENSE_INTER = 384
EXPERTS = 4
TOP_K = 2
LAYERS = 4  # + MTP layer 4
VOCAB = 512
LM = "model.language_model."
E4M3_MAX = 448.0


@dataclass(frozen=True)
class Dims:
    """Widths and counts; the defaults are the tiny test model (the constants above)."""

    hidden: int = HIDDEN
    moe_inter: int = MOE_INTER
    dense_inter: int = DENSE_INTER
    experts: int = EXPERTS
    layers: int = LAYERS
    vocab: int = VOCAB


@dataclass
class TinyGLM:
    path: Path
    config: dict[str, object]
    dims: Dims = field(default_factory=Dims)
    originals: dict[str, torch.Tensor] = field(default_factory=dict)  # dequantized, float32
    raw: dict[str, torch.Tensor] = field(default_factory=dict)  # as stored
    shard_of: dict[str, str] = field(default_factory=dict)

    @property
    def moe_layers(self) -> list[int]:
        return list(range(1, self.dims.layers + 1))

    def expert_name(self, layer: int, expert: int, proj: str) -> str:
        return f"{LM}layers.{layer}.mlp.experts.{expert}.{proj}.weight"


def to_fp8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Block-FP8 quantize ``w``: e4m3 values and float32 ``scale_inv`` per 128x128 block."""
    rows, cols = w.shape
    gr, gc = math.ceil(rows / 128), math.ceil(cols / 128)
    scale = torch.empty(gr, gc, dtype=torch.float32)
    q = torch.empty(rows, cols, dtype=torch.float8_e4m3fn)
    for i in range(gr):
        for j in range(gc):
            block = w[i * 128 : (i + 1) * 128, j * 128 : (j + 1) * 128]
            s = float(block.abs().max()) / E4M3_MAX or 1.0
            scale[i, j] = s
            q[i * 128 : (i + 1) * 128, j * 128 : (j + 1) * 128] = (block / s).to(
                torch.float8_e4m3fn
            )
    return q, scale


def _shapes(d: Dims) -> dict[str, tuple[tuple[int, ...], str]]:
    """name -> (shape, storage) with storage in fp8 / bf16 / f32."""
    out: dict[str, tuple[tuple[int, ...], str]] = {
        f"{LM}embed_tokens.weight": ((d.vocab, d.hidden), "bf16"),
        f"{LM}norm.weight": ((d.hidden,), "bf16"),
        "lm_head.weight": ((d.vocab, d.hidden), "bf16"),
    }
    kda = {
        "q_proj": (64, d.hidden),
        "k_proj": (64, d.hidden),
        "v_proj": (64, d.hidden),
        "q_conv1d": (64, 1, 4),
        "k_conv1d": (64, 1, 4),
        "v_conv1d": (64, 1, 4),
        "f_a_proj": (16, d.hidden),
        "f_b_proj": (64, 16),
        "b_proj": (2, d.hidden),
        "g_a_proj": (16, d.hidden),
        "g_b_proj": (64, 16),
        "o_norm": (32,),
        "o_proj": (d.hidden, 64),
    }
    for layer in range(d.layers + 1):
        p = f"{LM}layers.{layer}."
        out[p + "input_layernorm.weight"] = ((d.hidden,), "bf16")
        out[p + "post_attention_layernorm.weight"] = ((d.hidden,), "bf16")
        if layer < 3:  # KDA
            for name, shape in kda.items():
                out[p + f"self_attn.{name}.weight"] = (shape, "bf16")
            out[p + "self_attn.A_log"] = ((2,), "f32")
            out[p + "self_attn.dt_bias"] = ((64,), "f32")
        else:  # MLA + DSA indexer
            out[p + "self_attn.q_a_proj.weight"] = ((64, d.hidden), "fp8")
            out[p + "self_attn.q_a_layernorm.weight"] = ((64,), "bf16")
            out[p + "self_attn.q_b_proj.weight"] = ((128, 64), "fp8")
            out[p + "self_attn.kv_a_proj_with_mqa.weight"] = ((32, d.hidden), "fp8")
            out[p + "self_attn.kv_a_layernorm.weight"] = ((32,), "bf16")
            out[p + "self_attn.kv_b_proj.weight"] = ((256, 32), "bf16")
            out[p + "self_attn.o_proj.weight"] = ((d.hidden, 128), "fp8")
            ix = p + "self_attn.indexer."
            out[ix + "wq_b.weight"] = ((64, 64), "bf16")
            out[ix + "wk.weight"] = ((32, d.hidden), "bf16")
            out[ix + "k_norm.weight"] = ((32,), "bf16")
            out[ix + "k_norm.bias"] = ((32,), "bf16")
            out[ix + "weights_proj.weight"] = ((2, d.hidden), "bf16")
            out[ix + "index_kpool_compress_gate.weight"] = ((32, d.hidden), "bf16")
            out[ix + "index_kpool_compress_ape"] = ((4, 32), "bf16")
        if layer < d.layers:  # mHC, absent on the MTP layer
            for site in ("attn", "ffn"):
                out[p + f"hc_{site}_fn"] = ((24, 4 * d.hidden), "bf16")
                out[p + f"hc_{site}_base"] = ((24,), "f32")
                out[p + f"hc_{site}_scale"] = ((3,), "f32")
        else:
            for name in ("enorm", "hnorm", "shared_head.norm"):
                out[p + f"{name}.weight"] = ((d.hidden,), "bf16")
            out[p + "eh_proj.weight"] = ((d.hidden, 2 * d.hidden), "bf16")
        if layer == 0:
            out[p + "mlp.gate_proj.weight"] = ((d.dense_inter, d.hidden), "fp8")
            out[p + "mlp.up_proj.weight"] = ((d.dense_inter, d.hidden), "fp8")
            out[p + "mlp.down_proj.weight"] = ((d.hidden, d.dense_inter), "fp8")
            continue
        out[p + "mlp.gate.weight"] = ((d.experts, d.hidden), "bf16")
        out[p + "mlp.gate.e_score_correction_bias"] = ((d.experts,), "f32")
        for sub in [f"experts.{e}" for e in range(d.experts)] + ["shared_experts"]:
            out[p + f"mlp.{sub}.gate_proj.weight"] = ((d.moe_inter, d.hidden), "fp8")
            out[p + f"mlp.{sub}.up_proj.weight"] = ((d.moe_inter, d.hidden), "fp8")
            out[p + f"mlp.{sub}.down_proj.weight"] = ((d.hidden, d.moe_inter), "fp8")
    return out


# The vision tower, small: the tensor names, ranks and dtype (all BF16, no FP8 scale) of
# transformers' ``Glm5NextVisionModel`` state dict under ``model.visual.``, including the 5-D
# patch-embedding and 4-D downsample convolutions. Its output width is the text hidden size.
VISION = {
    "depth": 2,
    "hidden_size": 64,
    "num_heads": 2,
    "intermediate_size": 128,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "spatial_merge_size": 2,
    "in_channels": 3,
    "projection_intermediate_size": 160,
}


def vision_shapes(d: Dims) -> dict[str, tuple[tuple[int, ...], str]]:
    v, out_w = VISION, d.hidden
    h, i, ctx, m = (
        v["hidden_size"],
        v["intermediate_size"],
        v["projection_intermediate_size"],
        v["spatial_merge_size"],
    )
    p = "model.visual."
    out: dict[str, tuple[tuple[int, ...], str]] = {
        p + "patch_embed.proj.weight": (
            (h, v["in_channels"], v["temporal_patch_size"], v["patch_size"], v["patch_size"]),
            "bf16",
        ),
        p + "patch_embed.proj.bias": ((h,), "bf16"),
        p + "post_layernorm.weight": ((h,), "bf16"),
        p + "downsample.weight": ((out_w, h, m, m), "bf16"),
        p + "downsample.bias": ((out_w,), "bf16"),
        p + "merger.proj.weight": ((out_w, out_w), "bf16"),
        p + "merger.post_projection_norm.weight": ((out_w,), "bf16"),
        p + "merger.post_projection_norm.bias": ((out_w,), "bf16"),
        p + "merger.gate_proj.weight": ((ctx, out_w), "bf16"),
        p + "merger.up_proj.weight": ((ctx, out_w), "bf16"),
        p + "merger.down_proj.weight": ((out_w, ctx), "bf16"),
    }
    for b in range(v["depth"]):
        q = f"{p}blocks.{b}."
        out.update(
            {
                q + "norm1.weight": ((h,), "bf16"),
                q + "norm2.weight": ((h,), "bf16"),
                q + "attn.qkv.weight": ((3 * h, h), "bf16"),
                q + "attn.qkv.bias": ((3 * h,), "bf16"),
                q + "attn.proj.weight": ((h, h), "bf16"),
                q + "attn.proj.bias": ((h,), "bf16"),
                q + "attn.q_norm.weight": ((h // v["num_heads"],), "bf16"),
                q + "attn.k_norm.weight": ((h // v["num_heads"],), "bf16"),
                q + "mlp.gate_proj.weight": ((i, h), "bf16"),
                q + "mlp.gate_proj.bias": ((i,), "bf16"),
                q + "mlp.up_proj.weight": ((i, h), "bf16"),
                q + "mlp.up_proj.bias": ((i,), "bf16"),
                q + "mlp.down_proj.weight": ((h, i), "bf16"),
                q + "mlp.down_proj.bias": ((h,), "bf16"),
            }
        )
    return out


def config(d: Dims | None = None) -> dict[str, object]:
    d = d or Dims()
    text = {
        "model_type": "glm5_next_text",
        "hidden_size": d.hidden,
        "num_hidden_layers": d.layers,
        "num_nextn_predict_layers": 1,
        "vocab_size": d.vocab,
        "intermediate_size": d.dense_inter,
        "moe_intermediate_size": d.moe_inter,
        "n_routed_experts": d.experts,
        "num_experts_per_tok": TOP_K,
        "n_shared_experts": 1,
        "first_k_dense_replace": 1,
        "scoring_func": "sigmoid",
        "topk_method": "noaux_tc",
        "routed_scaling_factor": 2.5,
        "swiglu_limit": 10.0,
        "rms_norm_eps": 1e-5,
    }
    return {
        "architectures": ["Glm5NextForConditionalGeneration"],
        "model_type": "glm5_next",
        "text_config": text,
        "quantization_config": {
            "quant_method": "fp8",
            "fmt": "e4m3",
            "activation_scheme": "dynamic",
            "weight_block_size": [128, 128],
        },
    }


def _value(name: str, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    if name.endswith("norm.weight") or "layernorm" in name:
        return 1.0 + 0.1 * torch.randn(shape, generator=gen)
    t = torch.randn(shape, generator=gen) * 0.05
    if "experts." in name and name.endswith("proj.weight"):
        # Heavy-ish tails and a few outlier columns, like trained experts.
        t = t * (1 + torch.rand(shape[-1], generator=gen) * 3)
    return t


def build_tiny_glm(
    root: Path, *, seed: int = 0, shards: int = 3, dims: Dims | None = None, vision: bool = False
) -> TinyGLM:
    """Write the checkpoint to ``root`` and return what was written; ``vision`` adds the
    vision tower (``model.visual.*`` and ``vision_config``), as the released checkpoint has."""
    root.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    dims = dims or Dims()
    model = TinyGLM(root, config(dims), dims)
    shapes = _shapes(dims)
    if vision:
        shapes.update(vision_shapes(dims))
        model.config["vision_config"] = {
            "model_type": "glm5_next_vision",
            **VISION,
            "out_hidden_size": dims.hidden,
        }
    tensors: dict[str, torch.Tensor] = {}
    for name, (shape, storage) in shapes.items():
        value = _value(name, shape, gen)
        if storage == "fp8":
            q, s = to_fp8(value)
            tensors[name], tensors[name + "_scale_inv"] = q, s
            model.originals[name] = (
                q.float()
                * s.repeat_interleave(128, 0)[: shape[0]].repeat_interleave(128, 1)[:, : shape[1]]
            )
        elif storage == "bf16":
            tensors[name] = value.to(torch.bfloat16)
            model.originals[name] = tensors[name].float()
        else:
            tensors[name] = value.float()
            model.originals[name] = tensors[name]
    model.raw = tensors
    names = list(tensors)
    per = math.ceil(len(names) / shards)
    groups = [names[i : i + per] for i in range(0, len(names), per)]
    # Move one expert scale into the next shard: the index, not adjacency, says where it is.
    moved = f"{LM}layers.2.mlp.experts.1.gate_proj.weight_scale_inv"
    for i, group in enumerate(groups[:-1]):
        if moved in group:
            group.remove(moved)
            groups[i + 1].insert(0, moved)
    write_shards(root, {n: tensors[n] for n in names}, groups)
    for i, group in enumerate(groups):
        for n in group:
            model.shard_of[n] = shard_name(i, len(groups))
    (root / "config.json").write_text(json.dumps(model.config, indent=2), encoding="utf-8")
    (root / "tokenizer_config.json").write_text('{"model_max_length": 1024}', encoding="utf-8")
    return model


def shard_name(i: int, n: int) -> str:
    return f"model-{i + 1:05d}-of-{n:05d}.safetensors"


def write_shards(root: Path, tensors: dict[str, torch.Tensor], groups: list[list[str]]) -> None:
    from safetensors.torch import save_file

    weight_map: dict[str, str] = {}
    for i, group in enumerate(groups):
        fname = shard_name(i, len(groups))
        save_file({n: tensors[n].contiguous() for n in group}, str(root / fname))
        weight_map.update({n: fname for n in group})
    (root / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map}, indent=2), encoding="utf-8"
    )


def calibration_inputs(model: TinyGLM, tokens: int = 512, seed: int = 1) -> dict[int, torch.Tensor]:
    """Correlated, anisotropic inputs per MoE layer (what GPTQ exploits)."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    hidden = model.dims.hidden
    for layer in model.moe_layers:
        mix = torch.randn(hidden, hidden, generator=gen) / math.sqrt(hidden)
        scale = torch.exp(torch.randn(hidden, generator=gen))
        z = torch.randn(tokens, hidden, generator=gen)
        out[layer] = ((z @ mix + 0.5 * z) * scale).to(torch.bfloat16)
    return out


def read_checkpoint(dst: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a written sharded checkpoint, by name; all that its index lists."""
    from safetensors import safe_open

    index = json.loads((dst / "model.safetensors.index.json").read_text())
    out: dict[str, torch.Tensor] = {}
    for shard in sorted(set(index["weight_map"].values())):
        with safe_open(str(dst / shard), framework="pt") as fh:
            for name in fh.keys():  # noqa: SIM118 - safe_open has no __iter__
                out[name] = fh.get_tensor(name)
    assert set(out) == set(index["weight_map"])
    return out
