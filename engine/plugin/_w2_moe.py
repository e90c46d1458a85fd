# mypy: disable-error-code="misc,no-untyped-call"
# (vLLM's classes are untyped to mypy; subclassing them is the point of this module.)
"""vLLM quantization method ``sparkcode_w2``: routed experts served from their 2-bit codes.

Imported only by the ``w2_quant`` plugin feature (it needs vLLM). The checkpoint is the
format of ``docs/quant-format.md``; ``engine.codecs.p12_stream.decode_stream`` has already turned
P12-packed BF16 tensors back into plain ones, so linear layers load unquantized, and routed
experts arrive as ``experts.E.{gate,up,down}_proj.weight_{packed,scale,shape}``, which vLLM's
expert mapping renames to ``w13_weight_packed`` (gate rows first, then up) and
``w2_weight_packed`` and hands to the loaders below, one expert at a time.

The experts stay packed in memory (2.25 bits per weight). ``apply`` runs the experts a batch
routed to, each from its codes (``kernels.w2_dequant.w2_matmul``): on a GPU an expert with a
few tokens (decode) is multiplied straight from its codes by the Triton GEMV, one with more is
dequantized by the Triton kernel and multiplied; on a CPU the PyTorch references stand in.
A fused grouped GEMM over all routed experts at once is the next step for speed.
"""

from __future__ import annotations

import re
from typing import Any

import torch
import torch.nn.functional as F
from vllm.model_executor.layers.fused_moe import RoutedExperts
from vllm.model_executor.layers.fused_moe.fused_moe_method_base import FusedMoEMethodBase
from vllm.model_executor.layers.linear import LinearBase, UnquantizedLinearMethod
from vllm.model_executor.layers.quantization.base_config import (
    QuantizationConfig,
    QuantizeMethodBase,
)
from vllm.model_executor.utils import set_weight_attrs

from engine.codecs.format import FORMAT_VERSION, QUANT_METHOD
from kernels.w2_dequant import w2_matmul
from kernels.w2_layout import CODES_PER_BYTE, GROUP

from ._expert_load import PROJ_NAMES, SHARDS, check_shape, copy_rows, matrix_shape
from ._fp4_pool import COVERAGE, ExpertPool

__all__ = ["SparkcodeW2Config", "W2ExpertsMethod", "layer_index"]

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def layer_index(prefix: str) -> int | None:
    """The decoder layer a module prefix belongs to (``model.layers.3.mlp.experts`` -> 3)."""
    m = _LAYER.search(prefix)
    return int(m.group(1)) if m else None


class SparkcodeW2Config(QuantizationConfig):
    """``quantization_config`` of a sparkcode checkpoint (``quant_method: sparkcode_w2``)."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        self.config = config
        # Weights other than routed experts keep the source checkpoint's precision; FP8 ones
        # (GLM-5.3-Flash's attention, shared experts, dense MLP) are served by vLLM's own FP8
        # method under the source's config, which also names the BF16 modules to leave alone.
        source = config.get("source_quantization") or {}
        self.source: QuantizationConfig | None = None
        if source.get("quant_method") == "fp8":
            from vllm.model_executor.layers.quantization.fp8 import Fp8Config

            self.source = Fp8Config.from_config(source)
        # The FP4 pool's experts by layer, when the fp4_pool feature is on.
        self.pool: dict[int, list[int]] = {}
        from . import selected_features

        if "fp4_pool" in selected_features():
            for layer, expert in (config.get("fp4_pool") or {}).get("experts", []):
                self.pool.setdefault(int(layer), []).append(int(expert))

    @classmethod
    def get_name(cls) -> Any:
        return QUANT_METHOD

    @classmethod
    def get_supported_act_dtypes(cls) -> list[torch.dtype]:
        return [torch.bfloat16, torch.float16]

    @classmethod
    def get_min_capability(cls) -> int:
        return 80  # Triton bf16 kernels; the Spark's GB10 is sm_121

    @staticmethod
    def get_config_filenames() -> list[str]:
        return []  # read from config.json's quantization_config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> SparkcodeW2Config:
        version = config.get("format_version")
        if version != FORMAT_VERSION:
            raise ValueError(
                f"this checkpoint is sparkcode format version {version!r}; this sparkcode "
                f"serves version {FORMAT_VERSION} (docs/quant-format.md)"
            )
        experts = config.get("routed_experts") or {}
        if experts.get("bits") != 2 or experts.get("group_size") != GROUP:
            raise ValueError(
                f"sparkcode_w2 serves 2-bit experts with groups of {GROUP}, the checkpoint "
                f"says {experts!r}"
            )
        return cls(config)

    def apply_vllm_mapper(self, hf_to_vllm_mapper: Any) -> None:
        if self.source is not None:
            self.source.apply_vllm_mapper(hf_to_vllm_mapper)

    def get_quant_method(self, layer: torch.nn.Module, prefix: str) -> QuantizeMethodBase | None:
        if isinstance(layer, RoutedExperts):
            index = layer_index(prefix)
            pooled = self.pool.get(index, []) if index is not None else []
            return W2ExpertsMethod(layer.moe_config, pooled)
        if self.source is not None:
            return self.source.get_quant_method(layer, prefix)
        if isinstance(layer, LinearBase):
            return UnquantizedLinearMethod()
        return None


class W2ExpertsMethod(FusedMoEMethodBase):
    """Routed experts kept as W2 codes; see the module docstring.

    ``pooled`` experts also have an FP4 copy (``engine.plugin._fp4_pool``), used instead.
    """

    def __init__(self, moe: Any, pooled: list[int] | None = None) -> None:
        super().__init__(moe)
        self.pooled = list(pooled or [])

    def create_weights(
        self,
        layer: Any,
        num_experts: int,
        hidden_size: int,
        intermediate_size_per_partition: int,
        params_dtype: torch.dtype,
        **extra_weight_attrs: Any,
    ) -> None:
        parallel = self.moe.moe_parallel_config
        if parallel.tp_size > 1 or parallel.use_ep:
            raise ValueError(
                "sparkcode_w2 serves routed experts on one device; tensor and expert "
                "parallelism are not supported"
            )
        activation = str(getattr(self.moe.activation, "value", self.moe.activation))
        if activation != "silu":
            raise ValueError(f"sparkcode_w2 experts support the silu activation, not {activation}")
        for dim, what in ((hidden_size, "hidden size"), (intermediate_size_per_partition,
                                                          "expert intermediate size")):
            if dim % GROUP:
                raise ValueError(f"sparkcode_w2 needs a {what} divisible by {GROUP}, got {dim}")
        inter, hidden = intermediate_size_per_partition, hidden_size
        shapes = {
            "w13_weight_packed": (num_experts, 2 * inter, hidden // CODES_PER_BYTE),
            "w13_weight_scale": (num_experts, 2 * inter, hidden // GROUP),
            "w2_weight_packed": (num_experts, hidden, inter // CODES_PER_BYTE),
            "w2_weight_scale": (num_experts, hidden, inter // GROUP),
        }
        for name, shape in shapes.items():
            param = torch.nn.Parameter(torch.zeros(shape, dtype=torch.uint8), requires_grad=False)
            layer.register_parameter(name, param)
            set_weight_attrs(param, {"weight_loader": self._loader(layer, name, inter)})
        for name in ("w13_weight_shape", "w2_weight_shape"):
            param = torch.nn.Parameter(torch.zeros(num_experts, 2, dtype=torch.int64),
                                       requires_grad=False)
            layer.register_parameter(name, param)
            set_weight_attrs(param, {"weight_loader": self._loader(layer, name, inter)})
        # Which (expert, shard, tensor kind) arrived: checked after loading, because vLLM does
        # not track the loading of quantized checkpoints.
        layer.register_buffer(
            "w2q_loaded", torch.zeros(num_experts, 3, 3, dtype=torch.bool), persistent=False)
        layer.w2q_sizes = (inter, hidden)
        layer.w2q_pool = None
        if self.pooled:
            layer.w2q_pool = ExpertPool(layer, self.pooled, inter, hidden)
            COVERAGE.experts += len(self.pooled)

    def _loader(self, layer: Any, name: str, inter: int) -> Any:
        kind = 0 if name.endswith("_packed") else 1 if name.endswith("_scale") else 2

        def load(
            param: torch.nn.Parameter,
            loaded_weight: torch.Tensor,
            weight_name: str,
            shard_id: str,
            expert_id: int,
            return_success: bool = False,
        ) -> bool:
            mapper = getattr(layer, "_map_global_expert_id_to_local_expert_id", None)
            local = mapper(expert_id) if mapper is not None else expert_id
            if local < 0:
                return False  # another rank's expert
            shard = SHARDS[shard_id]
            if kind == 2:
                want = matrix_shape(shard, inter, int(layer.w2q_sizes[1]))
                param.data[local] = check_shape(loaded_weight, want, weight_name, expert_id)
            else:
                copy_rows(param.data[local], loaded_weight, shard, inter, weight_name, expert_id)
            layer.w2q_loaded[local, shard, kind] = True
            return True

        return load

    def process_weights_after_loading(self, layer: Any) -> None:
        kinds = ("weight_packed", "weight_scale", "weight_shape")
        missing = [f"experts.{e}.{PROJ_NAMES[s]}.{kinds[k]}"
                   for e, s, k in (~layer.w2q_loaded).nonzero().tolist()]
        if layer.w2q_pool is not None:
            missing += layer.w2q_pool.missing()
        if missing:
            shown = ", ".join(missing[:6])
            more = f" and {len(missing) - 6} more" if len(missing) > 6 else ""
            raise ValueError(
                f"{getattr(layer, 'layer_name', 'a MoE layer')}: the checkpoint has no "
                f"{shown}{more}")

    def get_fused_moe_quant_config(self, layer: Any) -> None:
        return None

    def apply(
        self,
        layer: Any,
        x: torch.Tensor,
        topk_weights: torch.Tensor,
        topk_ids: torch.Tensor,
        shared_experts: Any,
        shared_experts_input: torch.Tensor | None,
    ) -> torch.Tensor:
        inter, hidden = (int(v) for v in layer.w2q_sizes)
        top_k = topk_ids.shape[1]
        flat = topk_ids.reshape(-1).to(torch.int64)
        weights = topk_weights.reshape(-1, 1).to(x.dtype)
        on_input = bool(getattr(layer, "apply_router_weight_on_input", False))
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=layer.w13_weight_packed.shape[0]).tolist()
        out = torch.zeros_like(x)
        pool: ExpertPool | None = layer.w2q_pool
        start = pooled_pairs = 0
        for expert, count in enumerate(counts):
            if not count:
                continue
            slots = order[start : start + count]
            start += count
            tokens = slots // top_k
            xs = x[tokens] * weights[slots] if on_input else x[tokens]
            if pool is not None and expert in pool.slot:
                w13, w2 = pool.weights(expert, x.dtype)
                pooled_pairs += count
                gate_up = xs @ w13.t()
                act = F.silu(gate_up[:, :inter]) * gate_up[:, inter:]
                ys = act @ w2.t()
            else:
                gate_up = w2_matmul(xs, layer.w13_weight_packed[expert],
                                    layer.w13_weight_scale[expert], hidden)
                act = F.silu(gate_up[:, :inter]) * gate_up[:, inter:]
                ys = w2_matmul(act, layer.w2_weight_packed[expert],
                               layer.w2_weight_scale[expert], inter)
            out.index_add_(0, tokens, ys if on_input else ys * weights[slots])
        if COVERAGE.experts:  # some layer has a pool: every layer's tokens count
            COVERAGE.record(int(flat.numel()), pooled_pairs)
        return out
