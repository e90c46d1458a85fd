"""Converting single tensors: routed experts to W2 (RTN or GPTQ), BF16 to P12.

:class:`TensorConverter` holds what one conversion run needs besides the
shard loop: the checkpoint reader, the options, the calibration file with a
one-layer cache of inputs and Hessians, and the FP4 hot-pool plan.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from engine.codecs import hotpool, nvfp4, p12, w2
from engine.quant.calib import (
    DEFAULT_MIN_TOKENS,
    CalibrationError,
    CalibrationFile,
    DownFallback,
    LayerCalibration,
    expert_counts,
    route,
)
from engine.quant.checkpoint import SCALE_SUFFIX, CheckpointError, CheckpointReader, classify
from engine.quant.gptq import ScaleRule, gptq_quantize, output_error, relative_frobenius

Method = Literal["gptq", "rtn"]
GiB = 1 << 30


@dataclass(frozen=True)
class ConvertOptions:
    """Everything that decides the output bytes (a resume must use the same)."""

    method: Method = "gptq"
    calib: Path | None = None
    pool_gb: float = 2.0
    fp4_candidates_gb: float = 0.0
    damp: float = 0.01
    act_order: bool = True
    scales: ScaleRule = "weighted"  # GPTQ's group scale rule (engine.quant.w2_scales)
    refit: int = 1  # GPTQ scale-refit rounds
    blocksize: int = 128
    min_tokens: int = DEFAULT_MIN_TOKENS
    down_fallback: DownFallback = "rtn"
    device: str = "cpu"

    def fingerprint(self, calib_digest: str | None) -> dict[str, Any]:
        d = asdict(self)
        d["calib"] = calib_digest
        d.pop("device")  # where it runs does not change the algorithm
        if not d["fp4_candidates_gb"]:
            d.pop("fp4_candidates_gb")  # runs started before the option existed still resume
        return d


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    text = config.get("text_config")
    return text if isinstance(text, dict) else config


class TensorConverter:
    """State of one run: reader, options, calibration cache and pool plan."""

    def __init__(
        self, reader: CheckpointReader, options: ConvertOptions, calib: CalibrationFile | None
    ) -> None:
        self.reader = reader
        self.options = options
        self.calib = calib
        text = text_config(reader.config())
        self.top_k = int(text.get("num_experts_per_tok", 8))
        limit = text.get("swiglu_limit")
        self.swiglu_limit = float(limit) if limit else None
        self.experts = self._expert_table()
        glm = any(n.startswith("model.language_model.") for n in reader.headers)
        self.lm_prefix = "model.language_model." if glm else "model."
        self._layer_cache: LayerCalibration | None = None

    def _expert_table(self) -> dict[int, list[int]]:
        table: dict[int, set[int]] = {}
        for name in self.reader.headers:
            cls = classify(name)
            if cls.kind == "routed_expert" and cls.layer is not None and cls.expert is not None:
                table.setdefault(cls.layer, set()).add(cls.expert)
        return {layer: sorted(ids) for layer, ids in sorted(table.items())}

    def mlp_prefix(self, layer: int) -> str:
        return f"{self.lm_prefix}layers.{layer}.mlp."

    def _router(self, layer: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        name = self.mlp_prefix(layer) + "gate.weight"
        if name not in self.reader.headers:
            raise CheckpointError(f"MoE layer {layer} has routed experts but no router {name!r}")
        bias_name = self.mlp_prefix(layer) + "gate.e_score_correction_bias"
        bias = self.reader.dequantized(bias_name) if bias_name in self.reader.headers else None
        return self.reader.dequantized(name), bias

    def layer_calibration(self, layer: int) -> LayerCalibration | None:
        if self.calib is None:
            return None
        if self._layer_cache is not None and self._layer_cache.layer == layer:
            return self._layer_cache
        self._layer_cache = None  # drop the previous layer before loading the next
        inputs = self.calib.inputs(layer)
        if inputs is None:
            return None
        router, bias = self._router(layer)
        self._layer_cache = LayerCalibration.build(
            layer,
            inputs.to(self.options.device),
            router.to(self.options.device),
            None if bias is None else bias.to(self.options.device),
            self.top_k,
            min_tokens=self.options.min_tokens,
            fallback=self.options.down_fallback,
            swiglu_limit=self.swiglu_limit,
        )
        return self._layer_cache

    # -- hot pool ----------------------------------------------------------------------
    def plan_pool(self) -> dict[str, Any]:
        layers = list(self.experts)
        if not layers:
            return {"budget_bytes": 0, "experts": [], "coverage": 0.0, "counts_from": "none"}
        width = 1 + max(max(ids) for ids in self.experts.values())
        counts = torch.zeros(len(layers), width, dtype=torch.float64)
        sizes = torch.ones(len(layers), width, dtype=torch.float64)
        source = "uniform"
        for row, layer in enumerate(layers):
            ids = self.experts[layer]
            gate = self.reader.headers[
                self.mlp_prefix(layer) + f"experts.{ids[0]}.gate_proj.weight"
            ]
            inter, hidden = gate.shape
            sizes[row] = float(hotpool.expert_fp4_bytes(inter, hidden))
            layer_counts = self._layer_counts(layer, width)
            if layer_counts is None:
                counts[row, ids] = 1.0
            else:
                counts[row] = layer_counts.to(torch.float64)
                source = "calibration"
        budget = int(self.options.pool_gb * GiB)
        chosen = hotpool.select_pool(counts, sizes, budget) if budget > 0 else set()
        experts = sorted((layers[r], e) for r, e in chosen if e in self.experts[layers[r]])
        plan: dict[str, Any] = {
            "budget_bytes": budget,
            "experts": [list(p) for p in experts],
            "bytes": int(sum(float(sizes[r, e]) for r, e in chosen)),
            "coverage": hotpool.coverage(chosen, counts),
            "counts_from": source,
        }
        # Candidates: the next experts by the same ranking, within their own disk budget, so
        # the engine can swap them into the pool when live traffic prefers them.
        extra = int(self.options.fp4_candidates_gb * GiB)
        if extra > 0 and chosen:
            more = hotpool.select_pool(counts, sizes, extra, exclude=chosen)
            cands = sorted((layers[r], e) for r, e in more if e in self.experts[layers[r]])
            plan["candidates"] = [list(p) for p in cands]
            plan["candidates_budget_bytes"] = extra
            plan["candidates_bytes"] = int(sum(float(sizes[r, e]) for r, e in more))
        return plan

    def _layer_counts(self, layer: int, width: int) -> torch.Tensor | None:
        if self.calib is None:
            return None
        stored = self.calib.counts(layer)
        if stored is not None:
            if stored.numel() != width:
                raise CalibrationError(
                    f"layer {layer} expert_counts has {stored.numel()} "
                    f"entries; the checkpoint has {width} experts"
                )
            return stored.reshape(-1)
        inputs = self.calib.inputs(layer)
        if inputs is None:
            return None
        router, bias = self._router(layer)
        return expert_counts(route(inputs.float(), router, bias, self.top_k), width)

    # -- one tensor ----------------------------------------------------------------------
    def expert_weights(self, layer: int) -> Callable[[int], tuple[torch.Tensor, torch.Tensor]]:
        prefix = self.mlp_prefix(layer)
        dev = self.options.device

        def load(expert: int) -> tuple[torch.Tensor, torch.Tensor]:
            base = f"{prefix}experts.{expert}."
            return (
                self.reader.dequantized(base + "gate_proj.weight").to(dev),
                self.reader.dequantized(base + "up_proj.weight").to(dev),
            )

        return load

    def convert_expert(
        self, name: str, layer: int, expert: int, proj: str, pooled: bool
    ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        w = self.reader.dequantized(name).to(self.options.device)
        stats: dict[str, Any] = {
            "kind": "w2",
            "layer": layer,
            "expert": expert,
            "src_bytes": self._src_bytes(name),
        }
        calib = self.layer_calibration(layer)
        hessian: torch.Tensor | None = None
        source = "none"
        if calib is not None:
            if proj == "down_proj":
                hessian, source = calib.down_hessian(
                    expert, self.expert_weights(layer), self.experts[layer]
                )
            else:
                hessian, source = calib.gate_up_hessian, "shared"
            stats["tokens"] = calib.token_count(expert)
        opts = self.options
        if opts.method == "gptq" and calib is not None and hessian is not None:
            # The layer's experts share the gate/up Hessian: factor it once for all of them.
            shared = source == "shared"
            result = gptq_quantize(
                w,
                calib.gate_up_factor(opts.damp, opts.act_order) if shared else hessian,
                damp=opts.damp,
                act_order=opts.act_order,
                blocksize=opts.blocksize,
                scales=opts.scales,
                refit=opts.refit,
            )
            q = result.to_w2()
            stats["method"] = "gptq"
            stats["out_err"] = result.output_error  # from GPTQ's own sums: no extra product
        else:
            q = w2.quantize_rtn(w)
            q = w2.W2Tensor(q.packed.cpu(), q.scales_enc.cpu(), q.shape)
            stats["method"] = "rtn"
        approx = q.dequantize(torch.float32).to(w.device)
        stats["hessian"] = source
        stats["rel_fro"] = relative_frobenius(w, approx)
        if hessian is not None and "out_err" not in stats:
            stats["out_err"] = output_error(w, approx, hessian)
        out = q.to_state_dict(name)
        if pooled:
            fp4 = nvfp4.quantize(w.cpu())
            out.update(fp4.to_state_dict(name))
            stats["fp4_rel_fro"] = relative_frobenius(w, fp4.dequantize(torch.float32).to(w.device))
            stats["fp4_bytes"] = fp4.nbytes
        stats["out_bytes"] = q.nbytes
        return out, stats

    def _src_bytes(self, name: str) -> int:
        th = self.reader.headers[name]
        scale = self.reader.headers.get(name + SCALE_SUFFIX)
        return th.nbytes + (scale.nbytes if scale else 0)

    def convert_other(self, name: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        th = self.reader.headers[name]
        raw = self.reader.raw(name)
        cls = classify(name)
        stats: dict[str, Any] = {"layer": cls.layer, "dtype": th.dtype, "src_bytes": th.nbytes}
        if th.dtype == "BF16":
            packed = p12.pack(raw)
            stats.update(
                kind="p12", out_bytes=packed.nbytes, escapes=int(packed.escape_index.numel())
            )
            return packed.to_state_dict(name), stats
        stats.update(kind="copy", out_bytes=th.nbytes)
        return {name: raw}, stats


def check_calib_width(
    reader: CheckpointReader, conv: TensorConverter, calib: CalibrationFile
) -> None:
    for layer in conv.experts:
        if layer in calib.layers:
            router = reader.headers.get(conv.mlp_prefix(layer) + "gate.weight")
            if router is not None and router.shape[1] != calib.hidden_size:
                raise CalibrationError(
                    f"{calib.path} holds hidden size {calib.hidden_size}; "
                    f"layer {layer}'s router expects {router.shape[1]}"
                )
            return
