# mypy: disable-error-code="misc,no-untyped-call"
# (vLLM's classes are untyped to mypy; subclassing them is the point of this module.)
"""BF16 linears and embeddings served from their 12-bit P12 form (plugin feature ``p12_packed``).

A sparkcode checkpoint stores every BF16 tensor as P12 (``docs/quant-format.md`` §4). With
this feature the large ones stay packed in memory: the layer keeps each weight's payload,
exponent table and escapes as buffers, in row blocks of at most ``BLOCK_VALUES`` values, and

* a linear (or the lm_head) with up to ``DECODE_TOKENS`` input rows multiplies straight from
  the codes (``kernels.p12_gemv``); with more rows (prefill) each block is unpacked
  (``kernels.p12_unpack``) and multiplied, so the transient stays one block;
* an embedding lookup gather-decodes the requested rows (``kernels.p12_embed``).

Under tensor parallelism each rank packs its own part, cut by the layer's vLLM loader.
On a CPU the PyTorch references of those kernels stand in. Every op has a fixed output shape
and none reads a tensor value on the host, so the forward can be captured in a CUDA graph.
The loader (``engine.codecs.p12_stream``) hands each weight over decoded, with its packed form
attached; a layer whose weights come in any other form packs them itself (lossless either way).
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.nn.functional as F
from vllm.model_executor.layers.linear import LinearBase, LinearMethodBase
from vllm.model_executor.layers.vocab_parallel_embedding import (
    ParallelLMHead,
    UnquantizedEmbeddingMethod,
    VocabParallelEmbedding,
)
from vllm.model_executor.utils import set_weight_attrs

from engine.codecs import p12
from engine.codecs.p12_stream import packed_form
from kernels.p12_embed import RowEscapes, p12_embedding
from kernels.p12_gemv import p12_gemv
from kernels.p12_unpack import p12_unpack

__all__ = [
    "BLOCK_VALUES",
    "DECODE_TOKENS",
    "MIN_VALUES_ENV",
    "P12EmbeddingMethod",
    "P12LinearMethod",
    "adopt_embeddings",
    "keeps_packed",
    "packed_bf16_method",
    "packed_layers",
]

FEATURE = "p12_packed"

#: Up to this many input rows a linear multiplies from the codes; more rows unpack a block.
#: 8 = one verify step of DFlash2 at k=7 for one stream.
DECODE_TOKENS = 8

#: Row blocks hold at most this many values (256 MiB as BF16): the prefill transient.
BLOCK_VALUES = 1 << 27

#: Weights with fewer values than this stay decoded (default 2^20): their saving is small and
#: small layers are where model code reads ``weight`` directly (conv kernels, routers).
MIN_VALUES_ENV = "SPARKCODE_P12_MIN_VALUES"

_KINDS = ("payload", "exponents", "escape_index", "escape_values")
_QKV = {"q": 0, "k": 1, "v": 2}


def _min_values() -> int:
    raw = os.environ.get(MIN_VALUES_ENV, "")
    try:
        return int(raw) if raw else 1 << 20
    except ValueError:
        raise ValueError(
            f"{MIN_VALUES_ENV} must be a whole number of values, got {raw!r}"
        ) from None


def packed_bf16_method(layer: Any, method: Any) -> Any:
    """``method`` (what the layer would get), or a P12 method if it is a BF16 one to pack."""
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod

    if method is not None and not isinstance(
        method, (UnquantizedLinearMethod, UnquantizedEmbeddingMethod)
    ):
        return method  # FP8 or another quantized method: not a BF16 weight
    if not keeps_packed(layer):
        return method
    return P12EmbeddingMethod() if isinstance(layer, VocabParallelEmbedding) else P12LinearMethod()


def keeps_packed(layer: Any) -> bool:
    """Whether ``layer`` (a vLLM linear or embedding, weights not in FP8) is served packed."""
    from vllm.model_executor.layers.fused_moe.router.gate_linear import GateLinear

    from . import selected_features

    if FEATURE not in selected_features():
        return False
    if isinstance(layer, GateLinear) or not isinstance(layer, (LinearBase, VocabParallelEmbedding)):
        return False  # a router keeps its own (often fp32) weight and kernels
    dtype = getattr(layer, "params_dtype", None) or torch.get_default_dtype()
    if dtype != torch.bfloat16:
        return False
    if isinstance(layer, VocabParallelEmbedding):
        values = int(layer.org_vocab_size) * int(layer.embedding_dim)
    else:
        values = int(layer.input_size) * int(layer.output_size)
    return values >= _min_values()


class P12LinearMethod(LinearMethodBase):
    """A linear layer whose weight (each shard of a merged layer) is kept as P12 blocks."""

    def create_weights(
        self,
        layer: Any,
        input_size_per_partition: int,
        output_partition_sizes: list[int],
        input_size: int,
        output_size: int,
        params_dtype: torch.dtype,
        **extra_weight_attrs: Any,
    ) -> None:
        # vLLM's loaders look the weight up by name; it holds nothing once loaded.
        weight = torch.nn.Parameter(torch.empty(0, dtype=params_dtype), requires_grad=False)
        layer.register_parameter("weight", weight)
        set_weight_attrs(weight, {"weight_loader": self._loader(layer)})
        layer.p12_in = int(input_size_per_partition)
        layer.p12_rows = [int(r) for r in output_partition_sizes]
        # Per shard: (buffer name prefix, rows) of each row block, filled when it loads.
        layer.p12_blocks = [[] for _ in output_partition_sizes]
        layer.p12_bytes = [0, 0]  # packed bytes, bytes as BF16

    def _part(self, layer: Any, shard_id: Any) -> int:
        if shard_id is None:
            return 0
        if isinstance(shard_id, str) and shard_id in _QKV:
            return _QKV[shard_id]
        if isinstance(shard_id, int) and 0 <= shard_id < len(layer.p12_rows):
            return shard_id
        raise ValueError(
            f"{getattr(layer, 'prefix', 'a layer')}: P12-packed layers load one "
            f"shard at a time, got shard {shard_id!r}"
        )

    def _expected_rows(self, layer: Any, part: int) -> int:
        return int(layer.p12_rows[part])

    def _rank_part(
        self, layer: Any, part: int, loaded: torch.Tensor, shard_id: Any
    ) -> torch.Tensor:
        """Under tensor parallelism: this rank's rows (column-parallel, merged, QKV with its
        KV-head replicas, vocab shards with their padding) or columns (row-parallel) of
        ``loaded``, cut by the layer's own vLLM loader into a scratch tensor of the rank's
        shape, so every sharding rule stays vLLM's. The scratch is one layer's rank part as
        BF16, freed once the part is packed; the packed form the stream attached describes
        the whole tensor, so the part is packed here (lossless)."""
        rows = sum(int(r) for r in layer.p12_rows)
        scratch = torch.nn.Parameter(
            torch.zeros(rows, int(layer.p12_in), dtype=loaded.dtype), requires_grad=False
        )
        set_weight_attrs(scratch, {"output_dim": 0, "input_dim": 1})
        loader = type(layer).weight_loader
        try:
            if shard_id is None:
                loader(layer, scratch, loaded)
            else:
                loader(layer, scratch, loaded, shard_id)
        except (AssertionError, RuntimeError, IndexError) as exc:
            raise ValueError(
                f"{getattr(layer, 'prefix', '') or 'layer'}: weight shard {part} of shape "
                f"{tuple(loaded.shape)} does not split over {layer.tp_size} tensor-parallel "
                f"ranks into {tuple(scratch.shape)} ({exc or type(exc).__name__})"
            ) from None
        start = sum(int(r) for r in layer.p12_rows[:part])
        return scratch.data[start : start + int(layer.p12_rows[part])]

    def _block_values(self, layer: Any) -> int:
        return BLOCK_VALUES

    def _loader(self, layer: Any) -> Any:
        def load(
            param: torch.nn.Parameter, loaded_weight: torch.Tensor, shard_id: Any = None
        ) -> None:
            sid = getattr(loaded_weight, "shard_id", shard_id) if shard_id is None else shard_id
            part = self._part(layer, sid)
            name = getattr(layer, "prefix", "") or "layer"
            if _tp_size(layer) > 1:
                loaded_weight = self._rank_part(layer, part, loaded_weight, sid)
            want = (self._expected_rows(layer, part), int(layer.p12_in))
            if tuple(loaded_weight.shape) != want:
                raise ValueError(
                    f"{name}: weight shard {part} is {tuple(loaded_weight.shape)}, "
                    f"the model expects {want}"
                )
            packed = packed_form(loaded_weight)
            if packed is None:  # not from a P12 stream (or narrowed on the way): pack it here
                packed = p12.pack(loaded_weight.detach().to("cpu", torch.bfloat16).contiguous())
            self._store(layer, part, packed, param.device)

        return load

    def _store(self, layer: Any, part: int, packed: p12.PackedBF16, device: torch.device) -> None:
        rows, cols = packed.shape
        step = rows if cols % 2 else max(1, self._block_values(layer) // cols)
        blocks = []
        for b, start in enumerate(range(0, rows, step)):
            block = packed if step >= rows else packed.row_block(start, min(rows, start + step))
            prefix = f"p12_{part}_{b}"
            tensors = (
                block.payload,
                block.exponents,
                block.escape_index,
                block.escape_values.view(torch.int16),
            )
            for kind, tensor in zip(_KINDS, tensors, strict=True):
                layer.register_buffer(
                    f"{prefix}_{kind}", tensor.to(device).contiguous(), persistent=False
                )
            self._after_block(layer, prefix, block, device)
            blocks.append((prefix, block.shape[0]))
        layer.p12_blocks[part] = blocks
        layer.p12_bytes[0] += packed.nbytes
        layer.p12_bytes[1] += 2 * rows * cols

    def _after_block(
        self, layer: Any, prefix: str, block: p12.PackedBF16, device: torch.device
    ) -> None:
        """Hook for per-block extras (the embedding's row escapes)."""

    def process_weights_after_loading(self, layer: Any) -> None:
        if _source(layer) is not layer:
            return  # tied to an embedding, which checks its own weight
        missing = [i for i, blocks in enumerate(layer.p12_blocks) if not blocks]
        if missing:
            raise ValueError(
                f"{getattr(layer, 'prefix', 'a layer')}: the checkpoint has no "
                f"weight for shard(s) {missing}"
            )

    def apply(self, layer: Any, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        return _linear(_source(layer), x, bias)


class P12EmbeddingMethod(P12LinearMethod):
    """An embedding table (or lm_head) kept as P12: lookups gather-decode the rows."""

    def _expected_rows(self, layer: Any, part: int) -> int:
        if _tp_size(layer) > 1:  # the rank's shard, padded by vLLM's loader
            return int(layer.p12_rows[part])
        return int(layer.org_vocab_size)  # vLLM pads the table; the checkpoint has no padding

    def _block_values(self, layer: Any) -> int:
        # A lookup table stays one block (a gather has no transient); a head is split.
        return BLOCK_VALUES if isinstance(layer, ParallelLMHead) else 1 << 62

    def _after_block(
        self, layer: Any, prefix: str, block: p12.PackedBF16, device: torch.device
    ) -> None:
        if isinstance(layer, ParallelLMHead) or block.shape[1] % 2:
            return
        rows, dim = block.shape
        esc = RowEscapes.build(
            block.payload.to(device),
            block.exponents.to(device),
            block.escape_index,
            block.escape_values,
            rows,
            dim,
        )
        layer.p12_row_escapes = esc

    def embedding(self, layer: Any, input_: torch.Tensor) -> torch.Tensor:
        src = _source(layer)
        ((prefix, rows),) = src.p12_blocks[0]
        esc: RowEscapes | None = getattr(src, "p12_row_escapes", None)
        if esc is None:  # an odd row length: decode the table (slow, but such tables are rare)
            w = _unpack(src, prefix, rows)
            return F.embedding(input_, w)
        return p12_embedding(
            input_,
            getattr(src, f"{prefix}_payload"),
            getattr(src, f"{prefix}_exponents"),
            esc,
            rows,
            int(src.p12_in),
        )

    def tie_weights(self, layer: Any, embed_tokens: Any) -> Any:
        layer.weight = embed_tokens.weight
        layer.p12_tied = (embed_tokens,)  # a tuple, so torch does not adopt it as a child
        return layer


def _tp_size(layer: Any) -> int:
    """The layer's tensor-parallel size (1 for a replicated layer)."""
    from vllm.model_executor.layers.linear import ReplicatedLinear

    return 1 if isinstance(layer, ReplicatedLinear) else int(getattr(layer, "tp_size", 1))


def _source(layer: Any) -> Any:
    tied = getattr(layer, "p12_tied", None)
    return tied[0] if tied else layer


def _tensors(
    layer: Any, prefix: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    payload, exps, esc_i, esc_v = (getattr(layer, f"{prefix}_{kind}") for kind in _KINDS)
    return payload, exps, esc_i, esc_v


def _unpack(layer: Any, prefix: str, rows: int) -> torch.Tensor:
    payload, exps, esc_i, esc_v = _tensors(layer, prefix)
    cols = int(layer.p12_in)
    return p12_unpack(payload, exps, esc_i, esc_v, rows * cols).view(rows, cols)


def _linear(layer: Any, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    if not hasattr(layer, "p12_blocks"):  # tied to an embedding served unpacked
        return F.linear(x, layer.weight, bias)
    cols = int(layer.p12_in)
    flat = x.reshape(-1, cols)
    outs = []
    for blocks in layer.p12_blocks:
        for prefix, rows in blocks:
            if flat.shape[0] <= DECODE_TOKENS:
                outs.append(p12_gemv(flat, *_tensors(layer, prefix), (rows, cols)))
            else:
                outs.append(F.linear(flat, _unpack(layer, prefix, rows)))
    y = outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)
    if bias is not None:
        y = y + bias
    return y.reshape(*x.shape[:-1], y.shape[-1])


def adopt_embeddings(model: torch.nn.Module) -> int:
    """Serve packed the BF16 embedding tables a model built without a quantization config.

    Models may construct ``embed_tokens`` without one (GLM-5.3-Flash's vLLM class does), so
    the quantization method never sees it. Called before the weights load; returns how many
    tables were switched. A head tied to such a table follows it.
    """
    switched = 0
    for module in model.modules():
        if (
            not isinstance(module, VocabParallelEmbedding)
            or isinstance(module, ParallelLMHead)
            or not isinstance(module.quant_method, UnquantizedEmbeddingMethod)
            or module.weight.dtype != torch.bfloat16
            or not keeps_packed(module)
        ):
            continue
        old = module.weight
        del module._parameters["weight"]
        method = P12EmbeddingMethod()
        method.create_weights(
            module,
            module.embedding_dim,
            module.output_partition_sizes,
            module.embedding_dim,
            module.num_embeddings_padded,
            module.params_dtype,
        )
        module.quant_method = method
        for head in model.modules():
            if isinstance(head, ParallelLMHead) and head.weight is old:
                head.quant_method = method
                method.tie_weights(head, module)
        switched += 1
    return switched


def packed_layers(model: torch.nn.Module) -> tuple[int, int, int]:
    """``(layers, packed bytes, bytes they would take as BF16)`` over a loaded model."""
    n = packed = plain = 0
    for module in model.modules():
        sizes = getattr(module, "p12_bytes", None)
        if sizes and sizes[0] and _source(module) is module:
            n += 1
            packed += sizes[0]
            plain += sizes[1]
    return n, packed, plain
