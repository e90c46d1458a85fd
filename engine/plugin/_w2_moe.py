# mypy: disable-error-code="misc,no-untyped-call"
# (vLLM's classes are untyped to mypy; subclassing them is the point of this module.)
"""vLLM quantization method ``sparkcode_w2``: routed experts served from their 2-bit codes.

Imported only by the ``w2_quant`` plugin feature (it needs vLLM). The checkpoint is the
format of ``docs/quant-format.md``; ``engine.codecs.p12_stream.decode_stream`` has already turned
P12-packed BF16 tensors back into plain ones, so linear layers load unquantized, and routed
experts arrive as ``experts.E.{gate,up,down}_proj.weight_{packed,scale,shape}``, which vLLM's
expert mapping renames to ``w13_weight_packed`` (gate rows first, then up) and
``w2_weight_packed`` and hands to the loaders below, one expert at a time.

The experts stay packed in memory (2.25 bits per weight). ``apply`` is one call of
``kernels.w2_moe.w2_fused_moe``: three Triton launches per layer on a GPU (the FP4 pool's
experts read from their slots inside them), the PyTorch reference on a CPU; neither reads a
value back to the host, so vLLM can capture it in a CUDA graph. The layer's SwiGLU clamp
(``swiglu_limit``) and where the router weight goes are the layer's own, as in calibration.
Each layer keeps device counters of the pairs routed to each expert (``expert_tokens``,
``engine.plugin._fp4_pool``).
"""

from __future__ import annotations

import re
import time
from typing import Any

import torch
from vllm.model_executor.layers.fused_moe import RoutedExperts
from vllm.model_executor.layers.fused_moe.fused_moe_method_base import FusedMoEMethodBase
from vllm.model_executor.layers.linear import LinearBase, UnquantizedLinearMethod
from vllm.model_executor.layers.quantization.base_config import (
    QuantizationConfig,
    QuantizeMethodBase,
)
from vllm.model_executor.utils import set_weight_attrs

from engine.codecs.format import FORMAT_VERSION, QUANT_METHOD
from kernels.nvfp4_layout import BLOCK as FP4_BLOCK
from kernels.w2_layout import CODES_PER_BYTE, GROUP
from kernels.w2_moe import w2_fused_moe
from kernels.w2_moe_layout import MoEWeights

from ._expert_load import PROJ_NAMES, SHARDS, check_shape, copy_rows, matrix_shape
from ._fp4_pool import COVERAGE, ExpertPool
from ._p12_linear import packed_bf16_method

__all__ = ["SparkcodeW2Config", "W2ExpertsMethod", "layer_index", "local_expert_id"]

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

        # Candidates: FP4 copies beyond the pool, loaded to the host for live swaps.
        self.candidates: dict[int, list[int]] = {}
        if "fp4_pool" in selected_features():
            pool = config.get("fp4_pool") or {}
            for layer, expert in pool.get("experts", []):
                self.pool.setdefault(int(layer), []).append(int(expert))
            for layer, expert in pool.get("candidates", []):
                self.candidates.setdefault(int(layer), []).append(int(expert))

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
            candidates = self.candidates.get(index, []) if index is not None else []
            return W2ExpertsMethod(layer.moe_config, pooled, candidates=candidates, index=index)
        method: QuantizeMethodBase | None = None
        if self.source is not None:
            method = self.source.get_quant_method(layer, prefix)
        elif isinstance(layer, LinearBase):
            method = UnquantizedLinearMethod()
        packed: QuantizeMethodBase | None = packed_bf16_method(layer, method)
        return packed


class W2ExpertsMethod(FusedMoEMethodBase):
    """Routed experts kept as W2 codes; see the module docstring.

    ``pooled`` experts also have an FP4 copy (``engine.plugin._fp4_pool``), used instead.
    """

    def __init__(
        self,
        moe: Any,
        pooled: list[int] | None = None,
        *,
        candidates: list[int] | None = None,
        index: int | None = None,
    ) -> None:
        super().__init__(moe)
        self.pooled = list(pooled or [])
        self.candidates = list(candidates or []) if self.pooled else []
        self.index = index  # the decoder layer, for the engine log
        limit = getattr(moe, "swiglu_limit", None)
        self.swiglu_limit = float(limit) if limit is not None else None

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
        if (
            int(getattr(parallel, "dp_size", 1)) > 1
            or int(getattr(parallel, "pcp_size", 1)) > 1
            or getattr(parallel, "enable_eplb", False)
        ):
            raise ValueError(
                "sparkcode_w2 serves routed experts under tensor parallelism and expert "
                "parallelism without data parallelism (every rank sees every token); data or "
                "context parallelism of the experts and EPLB are not supported"
            )
        tp = (int(getattr(parallel, "tp_rank", 0)), int(parallel.tp_size))
        activation = str(getattr(self.moe.activation, "value", self.moe.activation))
        if activation != "silu":
            raise ValueError(f"sparkcode_w2 experts support the silu activation, not {activation}")
        for dim, what in (
            (hidden_size, "hidden size"),
            (intermediate_size_per_partition, "expert intermediate size"),
        ):
            if dim % GROUP:
                per_rank = " per tensor-parallel rank" if tp[1] > 1 and dim != hidden_size else ""
                raise ValueError(
                    f"sparkcode_w2 needs a {what}{per_rank} divisible by {GROUP}, got {dim}"
                )
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
            set_weight_attrs(param, {"weight_loader": self._loader(layer, name, inter, tp)})
        for name in ("w13_weight_shape", "w2_weight_shape"):
            param = torch.nn.Parameter(
                torch.zeros(num_experts, 2, dtype=torch.int64), requires_grad=False
            )
            layer.register_parameter(name, param)
            set_weight_attrs(param, {"weight_loader": self._loader(layer, name, inter, tp)})
        # Which (expert, shard, tensor kind) arrived: checked after loading, because vLLM does
        # not track the loading of quantized checkpoints.
        layer.register_buffer(
            "w2q_loaded", torch.zeros(num_experts, 3, 3, dtype=torch.bool), persistent=False
        )
        layer.w2q_sizes = (inter, hidden)
        layer.register_buffer(
            "expert_slot", torch.full((num_experts,), -1, dtype=torch.int32), persistent=False
        )
        layer.register_buffer(
            "expert_tokens", torch.zeros(num_experts, dtype=torch.int64), persistent=False
        )
        layer.w2q_pool = None
        # Expert parallelism: the checkpoint names global experts; this rank pools its own.
        # A rank holding none of them still gets the (empty) slot tensors: the checkpoint's
        # FP4 copies of other ranks' experts need a parameter to be refused by.
        to_local = local_expert_id(layer)
        pooled = [e for e in self.pooled if to_local(e) >= 0]
        if self.pooled:
            layer.w2q_pool = ExpertPool(
                layer,
                pooled,
                inter,
                hidden,
                num_experts,
                to_local=to_local,
                tp=tp,
                candidates=[e for e in self.candidates if to_local(e) >= 0],
            )
        COVERAGE.register(layer, len(pooled))

    def _loader(self, layer: Any, name: str, inter: int, tp: tuple[int, int]) -> Any:
        kind = 0 if name.endswith("_packed") else 1 if name.endswith("_scale") else 2

        def load(
            param: torch.nn.Parameter,
            loaded_weight: torch.Tensor,
            weight_name: str,
            shard_id: str,
            expert_id: int,
            return_success: bool = False,
        ) -> bool:
            local = local_expert_id(layer)(expert_id)
            if local < 0:
                return False  # another rank's expert
            shard = SHARDS[shard_id]
            if kind == 2:  # the checkpoint's whole matrix, whatever this rank holds of it
                want = matrix_shape(shard, inter * tp[1], int(layer.w2q_sizes[1]))
                param.data[local] = check_shape(loaded_weight, want, weight_name, expert_id)
            else:
                copy_rows(
                    param.data[local], loaded_weight, shard, inter, weight_name, expert_id, tp
                )
            layer.w2q_loaded[local, shard, kind] = True
            return True

        return load

    def process_weights_after_loading(self, layer: Any) -> None:
        kinds = ("weight_packed", "weight_scale", "weight_shape")
        missing = [
            f"experts.{e}.{PROJ_NAMES[s]}.{kinds[k]}"
            for e, s, k in (~layer.w2q_loaded).nonzero().tolist()
        ]
        if layer.w2q_pool is not None:
            missing += layer.w2q_pool.missing()
        if missing:
            shown = ", ".join(missing[:6])
            more = f" and {len(missing) - 6} more" if len(missing) > 6 else ""
            raise ValueError(
                f"{getattr(layer, 'layer_name', 'a MoE layer')}: the checkpoint has no "
                f"{shown}{more}"
            )
        layer.w2q_weights = moe_weights(layer)
        COVERAGE.start()
        # Every rank registers every layer the checkpoint gives candidates (the ranks'
        # all-reduce needs the same rows), also one whose candidates are on other ranks.
        if self.candidates:
            from ._pool_live import RESELECT

            RESELECT.register(self.index if self.index is not None else -1, layer)

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
        if x.is_cuda and torch.cuda.is_current_stream_capturing():
            COVERAGE.capture_seen = time.monotonic() + 30.0  # host-only: no counter reads now
        weights = getattr(layer, "w2q_weights", None) or moe_weights(layer)
        # Expert parallelism: ids are global; the map (on the device) sends another rank's
        # experts to -1, which the kernel and the reference skip: a partial sum, all-reduced
        # by vLLM's runner like a tensor-parallel one.
        expert_map = (
            getattr(layer, "expert_map", None) if self.moe.moe_parallel_config.use_ep else None
        )
        return w2_fused_moe(
            x,
            topk_weights,
            topk_ids,
            weights,
            swiglu_limit=self.swiglu_limit,
            weight_on_input=bool(getattr(layer, "apply_router_weight_on_input", False)),
            expert_tokens=layer.expert_tokens,
            expert_map=expert_map,
        )


def local_expert_id(layer: Any) -> Any:
    """``global id -> local id or -1`` for ``layer`` (vLLM's map under expert parallelism;
    the identity on a layer that holds every expert)."""
    mapper = getattr(layer, "_map_global_expert_id_to_local_expert_id", None)
    if mapper is None:
        return lambda expert: expert
    return lambda expert: int(mapper(expert))


def moe_weights(layer: Any) -> MoEWeights:
    """The kernel's view of ``layer``'s expert tensors (the same storage, nothing copied);
    a layer without a pool gets empty slot tensors."""
    if layer.w2q_pool is not None:
        f13 = (layer.w13_weight_fp4, layer.w13_weight_fp4_scale, layer.w13_weight_fp4_global_scale)
        f2 = (layer.w2_weight_fp4, layer.w2_weight_fp4_scale, layer.w2_weight_fp4_global_scale)
    else:
        inter, hidden = (int(v) for v in layer.w2q_sizes)
        dev = layer.w13_weight_packed.device

        def empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
            return torch.zeros((0, *shape), dtype=dtype, device=dev)

        f13 = (
            empty((2 * inter, hidden // 2), torch.uint8),
            empty((2 * inter, hidden // FP4_BLOCK), torch.float8_e4m3fn),
            empty((2,), torch.float32),
        )
        f2 = (
            empty((hidden, inter // 2), torch.uint8),
            empty((hidden, inter // FP4_BLOCK), torch.float8_e4m3fn),
            empty((1,), torch.float32),
        )
    w = MoEWeights(
        layer.w13_weight_packed.data,
        layer.w13_weight_scale.data,
        layer.w2_weight_packed.data,
        layer.w2_weight_scale.data,
        layer.expert_slot,
        *(t.data for t in f13),
        *(t.data for t in f2),
    )
    w.check()
    return w
