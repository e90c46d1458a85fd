"""Calibration data for GPTQ: routing and Hessians over a calibration file.

The file itself (format, capture hooks) is ``engine.codecs.calib_file``, shared with
the served model's capture; its names are re-exported here for the quantizer.

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

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

import torch

from engine.codecs.calib_file import CALIB_FORMAT as CALIB_FORMAT
from engine.codecs.calib_file import CALIB_VERSION as CALIB_VERSION
from engine.codecs.calib_file import ActivationCapture as ActivationCapture
from engine.codecs.calib_file import CalibrationError as CalibrationError
from engine.codecs.calib_file import CalibrationFile as CalibrationFile
from engine.codecs.calib_file import attach_to_model as attach_to_model
from engine.codecs.calib_file import file_digest as file_digest
from engine.codecs.calib_file import is_moe_block as is_moe_block
from engine.codecs.calib_file import save_calibration as save_calibration
from engine.codecs.calib_file import save_from_model as save_from_model
from engine.codecs.format import DEFAULT_MIN_TOKENS as DEFAULT_MIN_TOKENS
from engine.quant.gptq import HessianAccumulator, HessianFactor, factor_hessian

DownFallback = Literal["rtn", "pooled"]


# -- routing and Hessians ------------------------------------------------------------


def route(
    x: torch.Tensor, router_weight: torch.Tensor, bias: torch.Tensor | None, top_k: int
) -> torch.Tensor:
    """GLM-5.3 routing (``noaux_tc``, one group): top-k of ``sigmoid(x Wᵀ) + bias``.

    Returns expert ids ``[N, top_k]``. Scores are computed in float32 as the
    model's ``moe_router_dtype`` says.
    """
    scores = torch.sigmoid(x.float() @ router_weight.float().t())
    choice = scores + bias.float() if bias is not None else scores
    return torch.topk(choice, top_k, dim=-1).indices


def expert_counts(ids: torch.Tensor, n_experts: int) -> torch.Tensor:
    return torch.bincount(ids.reshape(-1), minlength=n_experts)


def down_inputs(
    x: torch.Tensor, gate_w: torch.Tensor, up_w: torch.Tensor, limit: float | None
) -> torch.Tensor:
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
        acc.add(rows[start : start + chunk])
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
    def build(
        cls,
        layer: int,
        inputs: torch.Tensor,
        router_weight: torch.Tensor,
        bias: torch.Tensor | None,
        top_k: int,
        **kw: Any,
    ) -> LayerCalibration:
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
            f = self._gate_up_factor = factor_hessian(
                self.gate_up_hessian, damp=damp, act_order=act_order
            )
        return f

    def tokens_for(self, expert: int) -> torch.Tensor:
        mask = (self.ids == expert).any(dim=-1)
        return self.inputs[mask]

    def token_count(self, expert: int) -> int:
        return int((self.ids == expert).any(dim=-1).sum())

    def down_hessian(
        self,
        expert: int,
        weights: Callable[[int], tuple[torch.Tensor, torch.Tensor]],
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
            return hessian_of(down_inputs(rows, gate_w, up_w, self.swiglu_limit)).hessian, "expert"
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
