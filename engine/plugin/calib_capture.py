"""Feature ``calib_capture``: the served model records its MoE-block inputs for GPTQ.

``sparkcode quantize --calib-from-engine`` serves a round's model eager with this feature on,
sends a code corpus through the OpenAI server and gets back a calibration file in the
converter's format (``engine.codecs.calib_file``). Python hooks fire only in eager mode, so the
capture profile always sets ``enforce_eager``.

After vLLM loads the model, forward pre-hooks go on every ``layers.{L}.mlp`` that owns
``experts`` (every ``layers.{L}.mlp`` with ``SPARKCODE_CAPTURE_ALL=1``, for dense models), and
one control hook on the model itself. The driver talks to it through files in
``SPARKCODE_CAPTURE_DIR``:

* ``hooks.json`` (written here after loading): how many blocks are hooked;
* ``arm`` (written by the driver once the engine is healthy): nothing is recorded before it,
  so vLLM's memory profiling and warm-up passes on dummy tokens stay out of the file;
* ``flush`` (written by the driver after its last prompt): the next forward pass, one trigger
  token that is not recorded, writes ``calib.safetensors`` and then ``capture.json`` (rows per
  layer, or the error) and removes the hooks.

``SPARKCODE_CAPTURE_TOKENS`` caps the rows kept per layer. One process holds the model
(tensor parallel size 1), which is how the Spark runs it.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

from ._registry import FEATURE_MARK, FeatureResult

NAME = "calib_capture"
ENV_DIR = "SPARKCODE_CAPTURE_DIR"
ENV_TOKENS = "SPARKCODE_CAPTURE_TOKENS"
ENV_ALL = "SPARKCODE_CAPTURE_ALL"
HOOKS_FILE = "hooks.json"
ARM_FILE = "arm"
FLUSH_FILE = "flush"
CALIB_FILE = "calib.safetensors"
RESULT_FILE = "capture.json"
LOADER = "vllm.model_executor.model_loader.base_loader"


def apply() -> FeatureResult:
    """Wrap vLLM's model loading so that the loaded model gets the capture hooks."""
    import importlib

    directory = os.environ.get(ENV_DIR)
    if not directory:
        return FeatureResult(NAME, "not applied", f"{ENV_DIR} is not set")
    base = importlib.import_module(LOADER).BaseModelLoader
    if getattr(base.load_model, FEATURE_MARK, None) != NAME:
        base.load_model = _wrap(base.load_model)
    return FeatureResult(NAME, "applied", f"MoE-block inputs recorded into {directory}")


def _wrap(load_model: Any) -> Any:
    @functools.wraps(load_model)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        model = load_model(self, *args, **kwargs)
        if not kwargs.get("prefix"):  # the target model, not a drafter
            EngineCapture.from_env().attach(model)
        return model

    setattr(wrapped, FEATURE_MARK, NAME)
    return wrapped


class EngineCapture:
    """The hooks on one served model and the file protocol of the module docstring."""

    def __init__(self, directory: Path, max_tokens: int, moe_only: bool) -> None:
        # The capture writes the converter's file format, so it uses the converter's hooks.
        from engine.codecs.calib_file import ActivationCapture, is_moe_block

        self.directory = directory
        self.capture = ActivationCapture(
            max_tokens=max_tokens, layer_filter=is_moe_block if moe_only else None, enabled=False
        )
        self._control: Any = None

    @classmethod
    def from_env(cls) -> EngineCapture:
        return cls(
            Path(os.environ[ENV_DIR]),
            int(os.environ.get(ENV_TOKENS, "16384")),
            os.environ.get(ENV_ALL, "") != "1",
        )

    def attach(self, model: Any) -> int:
        self.directory.mkdir(parents=True, exist_ok=True)
        count = self.capture.attach(model)
        self._control = model.register_forward_pre_hook(self._on_forward)
        _write_json(self.directory / HOOKS_FILE, {"hooks": count, "pid": os.getpid()})
        return count

    def _on_forward(self, _model: Any, _args: Any) -> None:
        if (self.directory / FLUSH_FILE).exists():
            self.capture.enabled = False
            self.finish()
        elif not self.capture.enabled and (self.directory / ARM_FILE).exists():
            self.capture.enabled = True

    def finish(self) -> None:
        from engine.codecs.calib_file import save_calibration

        self.capture.detach()
        if self._control is not None:
            self._control.remove()
            self._control = None
        inputs = self.capture.inputs()
        try:
            save_calibration(
                self.directory / CALIB_FILE,
                inputs,
                source=os.environ.get("SPARKCODE_CAPTURE_SOURCE", "served model"),
            )
            result: dict[str, Any] = {
                "layers": {str(k): int(v.shape[0]) for k, v in inputs.items()}
            }
        except Exception as exc:  # noqa: BLE001 - reported to the driver, never into vLLM
            result = {"error": f"{type(exc).__name__}: {exc}"}
        self.capture.captured.clear()
        _write_json(self.directory / RESULT_FILE, result)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    tmp.replace(path)
