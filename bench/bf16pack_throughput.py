"""Throughput of the lossless 12-bit BF16 codec against memcpy, measured side by side.

For each tensor: the time to copy its bytes (numpy copy into fresh memory, and torch
``clone``), to pack it, to unpack it into fresh memory and to unpack it into a preallocated
tensor (what a loader filling model parameters does). Each figure is the best of ``--repeat``
interleaved rounds, in wall-clock time and in the process's CPU time (the latter is steadier
on a shared machine). Ratio = memcpy time / codec time (1.0 = as fast as memcpy; the target
is >= 0.25 against the numpy copy).

    .venv/bin/python bench/bf16pack_throughput.py [--rows 4096] [--cols 4096] [--repeat 7]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial

import numpy as np
import torch

from engine.quant import bf16pack


def tensors(rows: int, cols: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    gauss = (torch.randn(rows, cols, generator=g) * 0.02).to(torch.bfloat16)
    sparse = gauss.clone()
    sparse[:, ::4] = 0  # exact zeros: exponent 0 joins the table, so the lookup path runs
    return {"gaussian weights": gauss, "25% zeros (lookup path)": sparse}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    for label, t in tensors(args.rows, args.cols).items():
        raw = t.view(torch.int16).numpy()
        packed = bf16pack.pack(t)
        dst = torch.empty_like(t)
        ops: dict[str, Callable[[], object]] = {
            "memcpy (numpy copy)": raw.copy,
            "memcpy (torch clone)": t.clone,
            "pack": partial(bf16pack.pack, t),
            "unpack": partial(bf16pack.unpack, packed),
            "unpack into out": partial(bf16pack.unpack, packed, out=dst),
        }
        best = dict.fromkeys(ops, float("inf"))
        cpu = dict.fromkeys(ops, float("inf"))
        for _ in range(args.repeat):
            for name, fn in ops.items():
                c0, t0 = time.process_time(), time.perf_counter()
                fn()
                best[name] = min(best[name], time.perf_counter() - t0)
                cpu[name] = min(cpu[name], time.process_time() - c0)
        assert torch.equal(bf16pack.unpack(packed).view(torch.int16), t.view(torch.int16))
        mb = t.numel() * 2 / 1e6
        memcpy = best["memcpy (numpy copy)"]
        print(
            f"\n{label}: {tuple(t.shape)} bf16, {mb:.1f} MB -> {packed.nbytes / 1e6:.1f} MB "
            f"({8 * packed.nbytes / t.numel():.2f} bits/value, "
            f"{packed.escape_index.numel()} escapes)"
        )
        cpu_memcpy = cpu["memcpy (numpy copy)"]
        print(
            f"{'operation':24s} {'wall ms':>8s} {'cpu ms':>8s} {'GB/s':>6s} "
            f"{'ratio (wall)':>12s} {'ratio (cpu)':>11s} {'vs torch clone':>14s}"
        )
        for name, sec in best.items():
            print(
                f"{name:24s} {sec * 1e3:8.1f} {cpu[name] * 1e3:8.1f} {mb / 1e3 / sec:6.2f} "
                f"{memcpy / sec:12.2f} {cpu_memcpy / max(cpu[name], 1e-9):11.2f} "
                f"{best['memcpy (torch clone)'] / sec:14.2f}"
            )
    print(
        f"\n(numpy {np.__version__}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} torch threads)"
    )


if __name__ == "__main__":
    main()
