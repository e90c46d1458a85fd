"""Calibration data for GPTQ: capture, file format, routing and Hessians.

Calibration file format (version 1)
-----------------------------------
One safetensors file. Its ``__metadata__`` holds ``format = "sparkcode-calib"``,
``version = "1"``, ``hidden_size``, ``source`` (free text: model, prompts) and
``tokens`` (rows per layer). Tensors, for every captured MoE layer ``L`` (the
checkpoint's layer index, so the MTP layer is ``num_hidden_layers``):

``layers.{L}.mlp_input``     BF16 ``[N, hidden]``: the normalised hidden state that
                             enters layer L's MoE block (router, shared and routed
                             experts all read exactly this).
``layers.{L}.expert_counts`` optional I64 ``[n_routed_experts]``: live routing counts
                             (e.g. from the engine); the hot pool prefers them.

Routing is not stored: the conversion recomputes it from the checkpoint's router
(``mlp.gate.weight`` and ``e_score_correction_bias``, sigmoid scores, top-k), so the
file stays valid whatever engine captured it.

Hessians
--------
Every routed expert of a layer reads the same input, so ``gate_proj`` and
``up_proj`` share one Hessian per layer built from all tokens. ``down_proj``
reads ``silu(gate x) * (up x)``, which differs per expert, so each expert gets a
Hessian from the tokens routed to it. An expert with fewer than ``min_tokens``
routed tokens (default 128) cannot support a reliable Hessian; it falls back to
``rtn`` (round-to-nearest, the default) or to ``pooled``: the Hessian of the down
inputs of every routed (token, expert) pair in the layer, which costs one extra
read of the layer's gate/up weights and is computed only if some expert needs it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from engine.codecs.format import DEFAULT_MIN_TOKENS as DEFAULT_MIN_TOKENS
from engine.errors import UserError
from engine.quant.gptq import HessianAccumulator, HessianFactor, factor_hessian

CALIB_FORMAT = "sparkcode-calib"
CALIB_VERSION = "1"
DownFallback = Literal["rtn", "pooled"]
_LAYER_KEY = re.compile(r"layers\.(\d+)\.mlp_input$")
_MODULE_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.mlp$")


class CalibrationError(UserError):
    """A calibration file is missing, corrupt or does not fit the model."""


# -- file format ---------------------------------------------------------------------


def save_calibration(
    path: Path,
    inputs: dict[int, torch.Tensor],
    *,
    counts: dict[int, torch.Tensor] | None = None,
    source: str = "",
) -> None:
    """Write a calibration file (atomically: temp file, then rename)."""
    from safetensors.torch import save_file

    if not inputs:
        raise CalibrationError("no activations to save: was the capture hook attached?")
    hidden = {int(t.shape[-1]) for t in inputs.values()}
    if len(hidden) != 1:
        raise CalibrationError(f"captured layers disagree on hidden size: {sorted(hidden)}")
    tensors = {f"layers.{layer}.mlp_input": t.reshape(-1, t.shape[-1]).to(torch.bfloat16)
               .contiguous() for layer, t in inputs.items()}
    for layer, c in (counts or {}).items():
        tensors[f"layers.{layer}.expert_counts"] = c.to(torch.int64).contiguous()
    meta = {"format": CALIB_FORMAT, "version": CALIB_VERSION, "hidden_size": str(hidden.pop()),
            "tokens": json.dumps({str(k): int(v.reshape(-1, v.shape[-1]).shape[0])
                                  for k, v in inputs.items()}),
            "source": source}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    save_file(tensors, str(tmp), metadata=meta)
    tmp.replace(path)


class CalibrationFile:
    """Read access to a calibration file, one layer at a time."""

    def __init__(self, path: Path) -> None:
        from safetensors import safe_open

        self.path = path
        if not path.is_file():
            raise CalibrationError(f"calibration file {path} does not exist")
        try:
            handle: Any = safe_open(str(path), framework="pt")
            meta = handle.metadata() or {}
            names = list(handle.keys())
        except Exception as exc:
            raise CalibrationError(f"calibration file {path} is not readable: {exc}") from exc
        if meta.get("format") != CALIB_FORMAT:
            raise CalibrationError(f"{path} is not a sparkcode calibration file "
                                   f"(format {meta.get('format')!r})")
        if meta.get("version") != CALIB_VERSION:
            raise CalibrationError(f"{path} has calibration format version "
                                   f"{meta.get('version')!r}; this build reads {CALIB_VERSION}")
        self._handle = handle
        self.metadata: dict[str, str] = dict(meta)
        self.hidden_size = int(meta.get("hidden_size", "0"))
        self.layers = sorted(int(m.group(1)) for n in names if (m := _LAYER_KEY.match(n)))
        self._names = set(names)

    def inputs(self, layer: int) -> torch.Tensor | None:
        """``[N, hidden]`` inputs of ``layer``'s MoE block, or None if not captured."""
        name = f"layers.{layer}.mlp_input"
        if name not in self._names:
            return None
        t: torch.Tensor = self._handle.get_tensor(name)
        if t.dim() != 2 or t.shape[1] != self.hidden_size:
            raise CalibrationError(f"{self.path}: {name} has shape {list(t.shape)}, "
                                   f"expected [N, {self.hidden_size}]")
        return t

    def counts(self, layer: int) -> torch.Tensor | None:
        name = f"layers.{layer}.expert_counts"
        if name not in self._names:
            return None
        t: torch.Tensor = self._handle.get_tensor(name)
        return t


def file_digest(path: Path) -> str:
    """sha256 of a file, streamed (to pin a conversion to its calibration file)."""
    import hashlib

    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


# -- capture -------------------------------------------------------------------------


@dataclass
class ActivationCapture:
    """Forward pre-hooks that record the input of every ``layers.{L}.mlp`` module.

    Works on any PyTorch model whose decoder layers are named ``...layers.{L}.mlp``:
    transformers models and vLLM's model classes alike. In vLLM the hooks only fire
    in eager mode (``enforce_eager=True``: CUDA graphs and torch.compile bypass
    Python hooks), and the model lives in the worker process, so either run with
    ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` and attach through ``LLM.apply_model``, or
    call :meth:`save` inside the worker. Prefill-only requests (``max_tokens=1``)
    are what a calibration pass wants.
    """

    max_tokens: int = 16384
    layer_filter: Callable[[int, torch.nn.Module], bool] | None = None
    enabled: bool = True  # False: hooks stay on but record nothing (an engine's warm-up)
    captured: dict[int, list[torch.Tensor]] = field(default_factory=dict)
    _handles: list[Any] = field(default_factory=list)

    def attach(self, model: torch.nn.Module) -> int:
        """Hook every matching module; returns how many were hooked."""
        for name, module in model.named_modules():
            m = _MODULE_LAYER.search(name)
            if m is None:
                continue
            layer = int(m.group(1))
            if self.layer_filter is not None and not self.layer_filter(layer, module):
                continue
            self._handles.append(
                module.register_forward_pre_hook(self._hook(layer), with_kwargs=True)
            )
        return len(self._handles)

    def _hook(self, layer: int) -> Callable[..., None]:
        def record(_module: torch.nn.Module, args: tuple[Any, ...],
                   kwargs: dict[str, Any]) -> None:
            x = args[0] if args else kwargs.get("hidden_states")
            if not self.enabled or not isinstance(x, torch.Tensor):
                return
            rows = x.detach().reshape(-1, x.shape[-1])
            have = sum(int(t.shape[0]) for t in self.captured.get(layer, []))
            room = self.max_tokens - have
            if room > 0:
                self.captured.setdefault(layer, []).append(
                    rows[:room].to("cpu", torch.bfloat16).clone())
        return record

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def inputs(self) -> dict[int, torch.Tensor]:
        return {layer: torch.cat(chunks) for layer, chunks in sorted(self.captured.items())}

    def save(self, path: Path, *, source: str = "") -> None:
        save_calibration(path, self.inputs(), source=source)


def is_moe_block(_layer: int, module: torch.nn.Module) -> bool:
    """Layer filter for MoE blocks (modules that own an ``experts`` child)."""
    return hasattr(module, "experts")


_MODEL_ATTR = "_sparkcode_capture"


def attach_to_model(model: torch.nn.Module, max_tokens: int = 16384,
                    moe_only: bool = True) -> int:
    """Hook ``model`` and keep the capture on it; for ``LLM.apply_model``.

    The capture object stays with the model, in whatever process the model
    lives in, so this also works with vLLM's worker processes (where
    ``apply_model`` ships a pickled function). Returns the number of hooks.
    """
    capture = ActivationCapture(max_tokens=max_tokens,
                                layer_filter=is_moe_block if moe_only else None)
    count = capture.attach(model)
    setattr(model, _MODEL_ATTR, capture)
    return count


def save_from_model(model: torch.nn.Module, path: str, source: str = "") -> int:
    """Detach the hooks :func:`attach_to_model` left on ``model`` and write the file.

    Returns how many layers were saved.
    """
    capture = getattr(model, _MODEL_ATTR, None)
    if not isinstance(capture, ActivationCapture):
        raise CalibrationError("no capture is attached to this model (call attach_to_model)")
    capture.detach()
    inputs = capture.inputs()
    save_calibration(Path(path), inputs, source=source)
    delattr(model, _MODEL_ATTR)
    return len(inputs)


# -- routing and Hessians ------------------------------------------------------------


def route(x: torch.Tensor, router_weight: torch.Tensor, bias: torch.Tensor | None,
          top_k: int) -> torch.Tensor:
    """GLM-5.3 routing (``noaux_tc``, one group): top-k of ``sigmoid(x Wᵀ) + bias``.

    Returns expert ids ``[N, top_k]``. Scores are computed in float32 as the
    model's ``moe_router_dtype`` says.
    """
    scores = torch.sigmoid(x.float() @ router_weight.float().t())
    choice = scores + bias.float() if bias is not None else scores
    return torch.topk(choice, top_k, dim=-1).indices


def expert_counts(ids: torch.Tensor, n_experts: int) -> torch.Tensor:
    return torch.bincount(ids.reshape(-1), minlength=n_experts)


def down_inputs(x: torch.Tensor, gate_w: torch.Tensor, up_w: torch.Tensor,
                limit: float | None) -> torch.Tensor:
    """The expert's down_proj input: ``silu(gate x) * (up x)`` with GLM's swiglu clamp."""
    gate = x @ gate_w.t()
    up = x @ up_w.t()
    if limit is not None:
        gate = gate.clamp(max=limit)
        up = up.clamp(-limit, limit)
    return torch.nn.functional.silu(gate) * up


def hessian_of(rows: torch.Tensor, chunk: int = 4096) -> HessianAccumulator:
    acc = HessianAccumulator(int(rows.shape[-1]), device=rows.device)
    for start in range(0, int(rows.shape[0]), chunk):
        acc.add(rows[start:start + chunk])
    return acc


@dataclass
class LayerCalibration:
    """One MoE layer's calibration inputs, routing and Hessians."""

    layer: int
    inputs: torch.Tensor  # float32 [N, hidden]
    ids: torch.Tensor  # [N, top_k]
    min_tokens: int = DEFAULT_MIN_TOKENS
    fallback: DownFallback = "rtn"
    swiglu_limit: float | None = None
    _gate_up: HessianAccumulator | None = None
    _gate_up_factor: HessianFactor | None = None
    _pooled: HessianAccumulator | None = None

    @classmethod
    def build(cls, layer: int, inputs: torch.Tensor, router_weight: torch.Tensor,
              bias: torch.Tensor | None, top_k: int, **kw: Any) -> LayerCalibration:
        x = inputs.float()
        return cls(layer, x, route(x, router_weight, bias, top_k), **kw)

    @property
    def gate_up_hessian(self) -> torch.Tensor:
        if self._gate_up is None:
            self._gate_up = hessian_of(self.inputs)
        return self._gate_up.hessian

    def gate_up_factor(self, damp: float, act_order: bool) -> HessianFactor:
        """The shared gate/up Hessian prepared for GPTQ, once per layer and options."""
        f = self._gate_up_factor
        if f is None or (f.damp, f.act_order) != (damp, act_order):
            f = self._gate_up_factor = factor_hessian(self.gate_up_hessian, damp=damp,
                                                      act_order=act_order)
        return f

    def tokens_for(self, expert: int) -> torch.Tensor:
        mask = (self.ids == expert).any(dim=-1)
        return self.inputs[mask]

    def token_count(self, expert: int) -> int:
        return int((self.ids == expert).any(dim=-1).sum())

    def down_hessian(
        self, expert: int, weights: Callable[[int], tuple[torch.Tensor, torch.Tensor]],
        experts: Iterable[int],
    ) -> tuple[torch.Tensor | None, str]:
        """Hessian for ``expert``'s down_proj and where it came from.

        ``weights(e)`` returns expert ``e``'s float32 (gate, up) weights;
        ``experts`` lists the layer's experts (used for the pooled fallback).
        Returns ``(None, "rtn")`` when the expert is starved and the fallback is RTN.
        """
        rows = self.tokens_for(expert)
        if rows.shape[0] >= self.min_tokens:
            gate_w, up_w = weights(expert)
            return hessian_of(down_inputs(rows, gate_w, up_w, self.swiglu_limit)).hessian, \
                "expert"
        if self.fallback == "rtn":
            return None, "rtn"
        if self._pooled is None:
            pooled = HessianAccumulator(0)
            for e in experts:
                routed = self.tokens_for(e)
                if routed.shape[0] == 0:
                    continue
                gate_w, up_w = weights(e)
                acc = hessian_of(down_inputs(routed, gate_w, up_w, self.swiglu_limit))
                if pooled.count == 0:
                    pooled = acc
                else:
                    pooled.merge(acc)
            self._pooled = pooled
        if self._pooled.count == 0:
            return None, "rtn"
        return self._pooled.hessian, "pooled"
