"""The calibration file: its format, and the hooks that capture it from a model.

Both the offline quantizer (``engine.quant.calib``, which adds routing and
Hessians) and the served model (``engine.plugin.calib_capture``) use it, so it
lives with the codecs: the plugin must not import the offline quantizer.

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
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from engine.errors import UserError

CALIB_FORMAT = "sparkcode-calib"
CALIB_VERSION = "1"
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
    tensors = {
        f"layers.{layer}.mlp_input": t.reshape(-1, t.shape[-1]).to(torch.bfloat16).contiguous()
        for layer, t in inputs.items()
    }
    for layer, c in (counts or {}).items():
        tensors[f"layers.{layer}.expert_counts"] = c.to(torch.int64).contiguous()
    meta = {
        "format": CALIB_FORMAT,
        "version": CALIB_VERSION,
        "hidden_size": str(hidden.pop()),
        "tokens": json.dumps(
            {str(k): int(v.reshape(-1, v.shape[-1]).shape[0]) for k, v in inputs.items()}
        ),
        "source": source,
    }
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
            raise CalibrationError(
                f"{path} is not a sparkcode calibration file (format {meta.get('format')!r})"
            )
        if meta.get("version") != CALIB_VERSION:
            raise CalibrationError(
                f"{path} has calibration format version "
                f"{meta.get('version')!r}; this build reads {CALIB_VERSION}"
            )
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
            raise CalibrationError(
                f"{self.path}: {name} has shape {list(t.shape)}, expected [N, {self.hidden_size}]"
            )
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
        def record(_module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            x = args[0] if args else kwargs.get("hidden_states")
            if not self.enabled or not isinstance(x, torch.Tensor):
                return
            rows = x.detach().reshape(-1, x.shape[-1])
            have = sum(int(t.shape[0]) for t in self.captured.get(layer, []))
            room = self.max_tokens - have
            if room > 0:
                self.captured.setdefault(layer, []).append(
                    rows[:room].to("cpu", torch.bfloat16).clone()
                )

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


def attach_to_model(model: torch.nn.Module, max_tokens: int = 16384, moe_only: bool = True) -> int:
    """Hook ``model`` and keep the capture on it; for ``LLM.apply_model``.

    The capture object stays with the model, in whatever process the model
    lives in, so this also works with vLLM's worker processes (where
    ``apply_model`` ships a pickled function). Returns the number of hooks.
    """
    capture = ActivationCapture(
        max_tokens=max_tokens, layer_filter=is_moe_block if moe_only else None
    )
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
