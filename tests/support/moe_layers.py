"""A ``sparkcode_w2`` MoE layer built and loaded the way vLLM does, at any shape, for tests.

``method_and_layer`` creates the method's weights on a bare module; ``load_experts`` feeds
random W2 experts (and NVFP4 copies of the pooled ones) through the method's own loaders,
as vLLM's expert mapping does, and returns the float32 weights each expert is served with.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F

from engine.codecs import nvfp4, w2

PROJS = (("gate_proj", "w1"), ("up_proj", "w3"), ("down_proj", "w2"))


def method_and_layer(
    experts: int,
    hidden: int,
    inter: int,
    pooled: tuple[int, ...] = (),
    swiglu_limit: float | None = None,
    *,
    tp: tuple[int, int] = (0, 1),
    ep: tuple[int, int] = (0, 1),
) -> tuple[Any, Any]:
    """A method and its layer as vLLM builds them on rank ``tp[0]`` of ``tp[1]`` (``inter``
    is the whole expert width, each rank gets ``inter / tp``), or on expert-parallel rank
    ``ep[0]`` of ``ep[1]`` holding the contiguous ``experts / ep`` experts (vLLM's "linear"
    placement; ``experts`` and ``pooled`` are global)."""
    from engine.plugin._w2_moe import W2ExpertsMethod

    use_ep = ep[1] > 1
    moe = SimpleNamespace(
        moe_parallel_config=SimpleNamespace(
            tp_size=tp[1],
            tp_rank=tp[0],
            use_ep=use_ep,
            ep_size=ep[1],
            ep_rank=ep[0],
            dp_size=1,
            pcp_size=1,
            enable_eplb=False,
        ),
        activation="silu",
        swiglu_limit=swiglu_limit,
    )
    method = W2ExpertsMethod(moe, list(pooled))
    layer = torch.nn.Module()
    local = experts // ep[1]
    if use_ep:
        expert_map = torch.full((experts,), -1, dtype=torch.int32)
        expert_map[ep[0] * local : (ep[0] + 1) * local] = torch.arange(local, dtype=torch.int32)
        layer.register_buffer("expert_map", expert_map, persistent=False)
        # A method vLLM calls on the layer (setattr: mypy knows no such attribute).
        name = "_map_global_expert_id_to_local_expert_id"
        setattr(layer, name, lambda e: int(expert_map[e]))
    method.create_weights(layer, local, hidden, inter // tp[1], torch.bfloat16)
    return method, layer


def random_expert(
    hidden: int, inter: int, g: torch.Generator, scale: float = 0.1
) -> dict[str, torch.Tensor]:
    return {
        "gate_proj": torch.randn(inter, hidden, generator=g) * scale,
        "up_proj": torch.randn(inter, hidden, generator=g) * scale,
        "down_proj": torch.randn(hidden, inter, generator=g) * scale,
    }


def load_experts(
    layer: torch.nn.Module,
    experts: int,
    hidden: int,
    inter: int,
    *,
    pooled: tuple[int, ...] = (),
    skip: str | None = None,
    seed: int = 0,
    scale: float = 0.1,
) -> dict[tuple[int, str], torch.Tensor]:
    """Load every expert; returns ``{(expert, proj): float32 weight as served}``."""
    g = torch.Generator().manual_seed(seed)
    dense: dict[tuple[int, str], torch.Tensor] = {}
    for e in range(experts):
        for proj, source in random_expert(hidden, inter, g, scale).items():
            shard = dict(PROJS)[proj]
            q = w2.quantize_rtn(source)
            dense[e, proj] = q.dequantize(torch.float32)
            tensors = q.to_state_dict("")
            if e in pooled:
                f = nvfp4.quantize(source)
                dense[e, proj] = f.dequantize(torch.float32)
                tensors.update(f.to_state_dict(""))
            param = "w2" if shard == "w2" else "w13"
            for kind, tensor in tensors.items():
                name = f"experts.{e}.{proj}.weight{kind}"
                if name == skip:
                    continue
                p = getattr(layer, f"{param}_weight{kind}")
                took = p.weight_loader(
                    p, tensor, name, shard_id=shard, expert_id=e, return_success=True
                )
                mapper = getattr(layer, "_map_global_expert_id_to_local_expert_id", None)
                assert took == (mapper is None or mapper(e) >= 0)  # another rank's: refused
    return dense


def dense_moe(
    x: torch.Tensor,
    ids: torch.Tensor,
    wts: torch.Tensor,
    dense: dict[tuple[int, str], torch.Tensor],
) -> torch.Tensor:
    """Plain per-token loop: ``sum_k w * down(silu(gate x) * up x)`` (no clamp)."""
    want = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for k in range(ids.shape[1]):
            e = int(ids[t, k])
            h = F.silu(x[t] @ dense[e, "gate_proj"].T) * (x[t] @ dense[e, "up_proj"].T)
            want[t] += wts[t, k] * (h @ dense[e, "down_proj"].T)
    return want


def random_moe_weights(
    experts: int,
    hidden: int,
    inter: int,
    pooled: tuple[int, ...] = (),
    seed: int = 0,
    device: str | torch.device = "cpu",
) -> Any:
    """A ``kernels.w2_moe_layout.MoEWeights`` of random codes and sane scales, at any size
    (no quantizer run: the kernels and the reference read the same bytes).

    W2 scales are ue5m3 bytes around 2^-7, FP4 block scales e4m3 around 2^-3 with global
    scales near 2^-4, so outputs stay O(1) for unit-variance inputs at GLM's widths.
    """
    from kernels.w2_moe_layout import MoEWeights

    g = torch.Generator().manual_seed(seed)

    def codes(*shape: int) -> torch.Tensor:
        return torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)

    def ue5m3(*shape: int, width: int) -> torch.Tensor:
        exp = 20 - 2 - (width.bit_length() // 2)  # about 1/sqrt(width) per weight
        return (exp << 3 | torch.randint(0, 8, shape, generator=g)).to(torch.uint8)

    def e4m3(*shape: int) -> torch.Tensor:
        return (torch.rand(*shape, generator=g) * 0.2 + 0.05).to(torch.float8_e4m3fn)

    s = len(pooled)
    slot = torch.full((experts,), -1, dtype=torch.int32)
    slot[list(pooled)] = torch.arange(s, dtype=torch.int32)
    w = MoEWeights(
        codes(experts, 2 * inter, hidden // 4),
        ue5m3(experts, 2 * inter, hidden // 32, width=hidden),
        codes(experts, hidden, inter // 4),
        ue5m3(experts, hidden, inter // 32, width=inter),
        slot,
        codes(s, 2 * inter, hidden // 2),
        e4m3(s, 2 * inter, hidden // 16),
        torch.rand(s, 2, generator=g) * 2.0 / hidden**0.5,
        codes(s, hidden, inter // 2),
        e4m3(s, hidden, inter // 16),
        torch.rand(s, 1, generator=g) * 2.0 / inter**0.5,
    )
    return MoEWeights(*(getattr(w, f).to(device) for f in w.__dataclass_fields__))
