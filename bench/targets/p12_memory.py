"""Serving memory of GLM-5.3-Flash's weights with P12 kept packed, from the real tensor list.

The tensor list is the model's own (``/work/shared/notes/glm53-flash.md`` §1-§2: names, shapes
and dtypes of the text stack that vLLM serves, plus the vision tower; the MTP layer 45 is not
loaded when a DFlash2 drafter speculates and is left out). Each tensor is costed as the engine
holds it:

* routed experts: W2, ``out*in/4 + out*in/32`` bytes per matrix; plus the 2 GiB FP4 pool;
* FP8 weights: one byte per value plus float32 ``scale_inv`` per 128x128 block;
* F32 tensors: 4 bytes per value;
* BF16 tensors: 2 bytes per value when decoded at load (before), or 12 bits per value plus
  the 16-byte exponent table and 10 bytes per escape when the ``p12_packed`` feature keeps
  them packed (after). Which ones stay packed follows vLLM 0.32's ``Glm5Next`` classes and
  ``engine.plugin._p12_linear.keeps_packed``: BF16 linears built with the model's
  quantization config and at least 2^20 values (KDA's merged q/k/v/b/f_a/g_a projection,
  f_b, g_b and o_proj), the lm_head, and ``embed_tokens`` (adopted at load). MLA and its
  indexer are built with ``quant_config=None`` and the routers, norms, convolutions and mHC
  mixers are not linears taking one, so they stay decoded.

The vision tower (``model.visual.*``, 563.6 M values from ``VISION``: transformers'
``Glm5NextVisionConfig`` defaults with ``out_hidden_size`` = the text hidden size 4096 that its
merger must produce) is served too: the profile passes no ``--language-model-only``. vLLM builds
it with ``quant_config=None``, so ``p12_packed`` never sees it and it is held decoded, 2 bytes per
value in both columns (on disk it is P12, 12 bits per value).

The escape rate of the real weights is unknown here (no GLM-5.3-Flash weights on this
machine); ``--escape-rate`` sets it (default 1/13,000, the rate measured on Gaussian matrices,
``docs/quant-format.md`` §4). Run: ``.venv/bin/python -m bench.targets.p12_memory``.
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict

HIDDEN, VOCAB, LAYERS = 4096, 154880, 45
FULL_ATTN = tuple(range(3, 45, 4))  # MLA + DSA layers
DENSE = (0, 1, 2)
EXPERTS, MOE_INTER, DENSE_INTER = 288, 2048, 12288
POOL_BUDGET = 2 * 2**30
FP4_EXPERT_BYTES = 3 * (2048 * 4096 * 9 // 16 + 4)  # docs/quant-format.md §5
SEED_MODEL_GIB = 99.6  # the seed's reported "model" memory on one Spark
DRAFTER_BYTES = 2_352_022_432  # incoai/GLM-5.3-Flash-DFlash2, BF16

# (name, shape, dtype, served packed?) ; dtype in bf16 / fp8 / f32 / w2
Tensor = tuple[str, tuple[int, ...], str, bool]

# GLM-5.3-Flash's vision tower (shared/notes/glm53-flash.md §1: depth 24, hidden 1024, 16
# heads, patch 14, temporal patch 2, merge 2, out 4096, projector 10240; the block MLP width
# 4096 is transformers' Glm5NextVisionConfig default).
VISION = {
    "depth": 24,
    "hidden": 1024,
    "heads": 16,
    "inter": 4096,
    "out": HIDDEN,
    "proj_inter": 10240,
    "patch": 14,
    "temporal": 2,
    "merge": 2,
    "channels": 3,
}


def vision_tensors() -> list[Tensor]:
    """The tower's tensors as the checkpoint names them (all BF16, none served packed)."""
    v, p = VISION, "model.visual."
    h, i, o, c = v["hidden"], v["inter"], v["out"], v["proj_inter"]
    shapes: dict[str, tuple[int, ...]] = {
        "patch_embed.proj.weight": (h, v["channels"], v["temporal"], v["patch"], v["patch"]),
        "patch_embed.proj.bias": (h,),
        "post_layernorm.weight": (h,),
        "downsample.weight": (o, h, v["merge"], v["merge"]),
        "downsample.bias": (o,),
        "merger.proj.weight": (o, o),
        "merger.post_projection_norm.weight": (o,),
        "merger.post_projection_norm.bias": (o,),
        "merger.gate_proj.weight": (c, o),
        "merger.up_proj.weight": (c, o),
        "merger.down_proj.weight": (o, c),
    }
    for b in range(v["depth"]):
        for name, shape in (
            ("norm1.weight", (h,)),
            ("norm2.weight", (h,)),
            ("attn.qkv.weight", (3 * h, h)),
            ("attn.qkv.bias", (3 * h,)),
            ("attn.proj.weight", (h, h)),
            ("attn.proj.bias", (h,)),
            ("attn.q_norm.weight", (h // v["heads"],)),
            ("attn.k_norm.weight", (h // v["heads"],)),
            ("mlp.gate_proj.weight", (i, h)),
            ("mlp.gate_proj.bias", (i,)),
            ("mlp.up_proj.weight", (i, h)),
            ("mlp.up_proj.bias", (i,)),
            ("mlp.down_proj.weight", (h, i)),
            ("mlp.down_proj.bias", (h,)),
        ):
            shapes[f"blocks.{b}.{name}"] = shape
    return [(p + n, s, "bf16", False) for n, s in shapes.items()]


VISION_ROW = "vision tower (BF16, held decoded)"


def tensors() -> list[Tensor]:
    lm = "model.language_model."
    out: list[Tensor] = [
        (f"{lm}embed_tokens.weight", (VOCAB, HIDDEN), "bf16", True),
        ("lm_head.weight", (VOCAB, HIDDEN), "bf16", True),
        (f"{lm}norm.weight", (HIDDEN,), "bf16", False),
    ]
    for layer in range(LAYERS):
        p = f"{lm}layers.{layer}."
        out += [
            (p + "input_layernorm.weight", (HIDDEN,), "bf16", False),
            (p + "post_attention_layernorm.weight", (HIDDEN,), "bf16", False),
        ]
        for site in ("attn", "ffn"):
            out += [
                (p + f"hc_{site}_fn", (24, 4 * HIDDEN), "bf16", False),
                (p + f"hc_{site}_base", (24,), "f32", False),
                (p + f"hc_{site}_scale", (3,), "f32", False),
            ]
        a = p + "self_attn."
        if layer in FULL_ATTN:
            out += [
                (a + "q_a_proj.weight", (1536, HIDDEN), "fp8", False),
                (a + "q_a_layernorm.weight", (1536,), "bf16", False),
                (a + "q_b_proj.weight", (16384, 1536), "fp8", False),
                (a + "kv_a_proj_with_mqa.weight", (512, HIDDEN), "fp8", False),
                (a + "kv_a_layernorm.weight", (512,), "bf16", False),
                (a + "kv_b_proj.weight", (32768, 512), "bf16", False),
                (a + "o_proj.weight", (HIDDEN, 16384), "fp8", False),
            ]
            ix = a + "indexer."
            out += [
                (ix + "wq_b.weight", (4096, 1536), "bf16", False),
                (ix + "wk.weight", (128, HIDDEN), "bf16", False),
                (ix + "k_norm.weight", (128,), "bf16", False),
                (ix + "k_norm.bias", (128,), "bf16", False),
                (ix + "weights_proj.weight", (32, HIDDEN), "bf16", False),
                (ix + "index_kpool_compress_gate", (128, HIDDEN), "bf16", False),
                (ix + "index_kpool_compress_ape", (4, 128), "bf16", False),
            ]
        else:  # KDA: q/k/v/b/f_a/g_a are one merged linear of 102 M values
            for name, shape in (
                ("q_proj", (8192, HIDDEN)),
                ("k_proj", (8192, HIDDEN)),
                ("v_proj", (8192, HIDDEN)),
                ("b_proj", (64, HIDDEN)),
                ("f_a_proj", (128, HIDDEN)),
                ("g_a_proj", (128, HIDDEN)),
                ("f_b_proj", (8192, 128)),
                ("g_b_proj", (8192, 128)),
                ("o_proj", (HIDDEN, 8192)),
            ):
                out.append((a + f"{name}.weight", shape, "bf16", True))
            for name in ("q_conv1d", "k_conv1d", "v_conv1d"):
                out.append((a + f"{name}.weight", (8192, 1, 4), "bf16", False))
            out += [
                (a + "o_norm.weight", (128,), "bf16", False),
                (a + "A_log", (64,), "f32", False),
                (a + "dt_bias", (8192,), "f32", False),
            ]
        m = p + "mlp."
        if layer in DENSE:
            out += [
                (m + f"{n}.weight", s, "fp8", False)
                for n, s in (
                    ("gate_proj", (DENSE_INTER, HIDDEN)),
                    ("up_proj", (DENSE_INTER, HIDDEN)),
                    ("down_proj", (HIDDEN, DENSE_INTER)),
                )
            ]
            continue
        out += [
            (m + "gate.weight", (EXPERTS, HIDDEN), "bf16", False),
            (m + "gate.e_score_correction_bias", (EXPERTS,), "f32", False),
        ]
        for n, s in (
            ("gate_proj", (MOE_INTER, HIDDEN)),
            ("up_proj", (MOE_INTER, HIDDEN)),
            ("down_proj", (HIDDEN, MOE_INTER)),
        ):
            out.append((m + f"shared_experts.{n}.weight", s, "fp8", False))
            out += [(m + f"experts.{e}.{n}.weight", s, "w2", False) for e in range(EXPERTS)]
    return out


def numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def cost(t: Tensor, escape_rate: float, packed: bool) -> int:
    _, shape, dtype, keeps = t
    n = numel(shape)
    if dtype == "w2":
        return n // 4 + n // 32
    if dtype == "fp8":
        return n + 4 * math.ceil(shape[0] / 128) * math.ceil(shape[1] / 128)
    if dtype == "f32":
        return 4 * n
    if packed and keeps:
        return 3 * ((n + 1) // 2) + 16 + 10 * round(n * escape_rate)
    return 2 * n


def group(name: str, dtype: str) -> str:
    if name.startswith("model.visual."):
        return VISION_ROW
    if dtype == "w2":
        return "routed experts (W2)"
    if "embed_tokens" in name or name.startswith("lm_head"):
        return "embed_tokens + lm_head (BF16)"
    if dtype == "bf16":
        if (
            ".self_attn." in name
            and ("_proj" in name)
            and "indexer" not in name
            and ("kv_b_proj" not in name)
        ):
            return "KDA projections (BF16)"
        return "other BF16 (MLA kv_b, indexer, mHC, routers, norms, convs)"
    return "FP8 / F32 (MLA, shared experts, dense MLP, scales)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--escape-rate", type=float, default=1 / 13000)
    args = ap.parse_args()
    rows: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for t in tensors() + vision_tensors():
        g = rows[group(t[0], t[2])]
        g[0] += numel(t[1])
        g[1] += cost(t, args.escape_rate, packed=False)
        g[2] += cost(t, args.escape_rate, packed=True)
    pool_experts = POOL_BUDGET // FP4_EXPERT_BYTES
    rows["FP4 hot-expert pool (2 GiB budget)"] = [
        0,
        pool_experts * FP4_EXPERT_BYTES,
        pool_experts * FP4_EXPERT_BYTES,
    ]
    # A separate BF16 checkpoint, served as is (notes §8); vLLM counts it in the model memory.
    rows["DFlash2 drafter (BF16, own checkpoint)"] = [0, DRAFTER_BYTES, DRAFTER_BYTES]
    order = [
        "routed experts (W2)",
        "FP4 hot-expert pool (2 GiB budget)",
        "KDA projections (BF16)",
        "embed_tokens + lm_head (BF16)",
        "other BF16 (MLA kv_b, indexer, mHC, routers, norms, convs)",
        "FP8 / F32 (MLA, shared experts, dense MLP, scales)",
        VISION_ROW,
        "DFlash2 drafter (BF16, own checkpoint)",
    ]
    gib = 2.0**30
    print(f"escape rate {args.escape_rate:.2e}; FP4 pool {pool_experts} experts")
    print("| part | values | decoded at load (GiB) | P12 kept packed (GiB) | saved (GiB) |")
    print("|---|---|---|---|---|")
    total = [0, 0]
    for name in order:
        n, before, after = rows[name]
        total[0] += before
        total[1] += after
        print(f"| {name} | {n / 1e9:.3f} B |" if n else f"| {name} | |", end="")
        print(f" {before / gib:.2f} | {after / gib:.2f} | {(before - after) / gib:.2f} |")
    print(
        f"| **total** | | **{total[0] / gib:.2f}** | **{total[1] / gib:.2f}** | "
        f"**{(total[0] - total[1]) / gib:.2f}** |"
    )
    print(
        f"seed's model memory {SEED_MODEL_GIB} GiB: decoded {total[0] / gib:.2f} GiB "
        f"({total[0] / gib - SEED_MODEL_GIB:+.2f}), packed {total[1] / gib:.2f} GiB "
        f"({total[1] / gib - SEED_MODEL_GIB:+.2f})"
    )


if __name__ == "__main__":
    main()
