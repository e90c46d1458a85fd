"""Throughput of the lossless 12-bit BF16 codec against memcpy, measured side by side.

For each tensor: the time to copy its bytes (numpy copy into fresh memory, and torch
``clone``), to pack it, to unpack it into fresh memory and to unpack it into a preallocated
tensor (what a loader filling model parameters does). Each figure is the best of ``--repeat``
interleaved rounds, in wall-clock time and in the process's CPU time (the latter is steadier
on a shared machine). Ratio = memcpy time / codec time (1.0 = as fast as memcpy; the target
is >= 0.25 against the numpy copy).

A last row runs over every tensor of a real model, the cpu-demo's SmolLM2-135M-Instruct.
Where the compiled loops are built (``p12.BACKEND == "c"``) the numpy fallback is
measured beside them. Each table ends with PASS or FAIL against the target.

    .venv/bin/python -m bench.targets.p12_throughput [--rows 4096] [--cols 4096] [--repeat 7]
                                                   [--no-real]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import torch

from engine.codecs import p12

TARGET = 0.25


def tensors(rows: int, cols: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    gauss = (torch.randn(rows, cols, generator=g) * 0.02).to(torch.bfloat16)
    sparse = gauss.clone()
    sparse[:, ::4] = 0  # exact zeros: exponent 0 joins the table, so the lookup path runs
    return {"gaussian weights": gauss, "25% zeros (lookup path)": sparse}


def smollm2_weights() -> list[torch.Tensor]:
    """Every tensor of the cpu-demo model (SmolLM2-135M-Instruct) as BF16: real weights."""
    from safetensors.torch import load_file

    from engine.models import convert_gguf, smollm2_gguf_path
    from engine.paths import Paths

    target = Paths.from_env().models_dir / "smollm2-135m-instruct"
    if not (target / "config.json").is_file():
        convert_gguf(smollm2_gguf_path(), target, progress=print)
    out: list[torch.Tensor] = []
    for shard in sorted(target.glob("*.safetensors")):
        out += [t.to(torch.bfloat16).contiguous() for t in load_file(shard).values()]
    return out


def on_numpy(fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` run on the numpy backend."""

    def run() -> object:
        p12.BACKEND = "numpy"
        try:
            return fn()
        finally:
            p12.BACKEND = "c"

    return run


def measure(label: str, ts: list[torch.Tensor], repeat: int) -> None:
    """Each operation over all of ``ts``, best of ``repeat`` interleaved rounds."""
    raws = [t.view(torch.int16).numpy() for t in ts]
    packs = [p12.pack(t) for t in ts]
    dsts = [torch.empty_like(t) for t in ts]
    ops: dict[str, Callable[[], object]] = {
        "memcpy (numpy copy)": lambda: [r.copy() for r in raws],
        "memcpy (torch clone)": lambda: [t.clone() for t in ts],
        "pack": lambda: [p12.pack(t) for t in ts],
        "unpack": lambda: [p12.unpack(p) for p in packs],
        "unpack into out": lambda: [p12.unpack(p, out=d) for p, d in zip(packs, dsts, strict=True)],
    }
    if p12.BACKEND == "c":
        ops["pack (numpy fallback)"] = on_numpy(ops["pack"])
        ops["unpack (numpy fallback)"] = on_numpy(ops["unpack"])
    best = dict.fromkeys(ops, float("inf"))
    cpu = dict.fromkeys(ops, float("inf"))
    for _ in range(repeat):
        for name, fn in ops.items():
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
            cpu[name] = min(cpu[name], time.process_time() - c0)
    for t, p in zip(ts, packs, strict=True):
        assert torch.equal(p12.unpack(p).view(torch.int16), t.view(torch.int16))
    values = sum(t.numel() for t in ts)
    mb = values * 2 / 1e6
    packed_bytes = sum(p.nbytes for p in packs)
    escapes = sum(p.escape_index.numel() for p in packs)
    shape = tuple(ts[0].shape) if len(ts) == 1 else f"{len(ts)} tensors"
    print(
        f"\n{label}: {shape} bf16, {mb:.1f} MB -> {packed_bytes / 1e6:.1f} MB "
        f"({8 * packed_bytes / values:.2f} bits/value, {escapes} escapes)"
    )
    memcpy = best["memcpy (numpy copy)"]
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
    worst = min(memcpy / best[name] for name in ("pack", "unpack"))
    verdict = "PASS" if worst >= TARGET else "FAIL"
    print(
        f"{verdict}: {p12.BACKEND} backend, worst of pack/unpack {worst:.2f} (target >= {TARGET})"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument(
        "--no-real",
        action="store_true",
        help="skip the real-weights row (SmolLM2-135M, converted on first use)",
    )
    args = ap.parse_args()
    for label, t in tensors(args.rows, args.cols).items():
        measure(label, [t], args.repeat)
    if not args.no_real:
        measure(
            "SmolLM2-135M-Instruct, every tensor (real weights)", smollm2_weights(), args.repeat
        )
    print(
        f"\n(backend {p12.BACKEND}, numpy {np.__version__}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} torch threads)"
    )


if __name__ == "__main__":
    main()
