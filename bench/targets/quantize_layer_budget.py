"""Time and peak memory of one GLM-5.3-Flash MoE layer through `sparkcode quantize`, projected.

Writes a one-MoE-layer checkpoint of the test fixture at GLM-5.3-Flash's real widths (hidden
4096, expert intermediate 2048, FP8 with 128x128 scales) holding ``--experts`` routed experts,
and calibration inputs of ``--tokens`` rows (the one-box default, 16384), then runs the real
converter (``engine.quant.pipeline.convert``, GPTQ with act-order) in this process while a
thread samples its anonymous resident memory (RssAnon) every 20 ms. Each expert tensor's
finish time comes from the converter's progress callbacks, so the per-expert cost (three
GPTQ solves, the down_proj Hessian, dequantization, W2 encoding, statistics) is measured
apart from the layer's fixed cost (routing, the shared gate/up Hessian).

Projection: one layer = fixed + 288 x per-expert; the checkpoint = 42 such layers (the MTP
layer's experts add one more, printed separately). Memory does not grow with the number of
experts: one expert is converted at a time next to the layer's inputs and Hessian.

The routing is top-1 over the bench's experts, so each expert gets ``tokens / experts`` rows
for its down_proj Hessian (4096 at the defaults) where the real model routes about
16384 x 8 / 288 = 455: the per-expert time is an upper bound by that step.

    .venv/bin/python -m bench.targets.quantize_layer_budget [--experts 4] [--tokens 16384]
                                        [--method rtn] [--device cuda] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path

import torch

from engine.quant.calib import save_calibration
from engine.quant.checkpoint import ShardInfo
from engine.quant.pipeline import ConvertOptions, SilentProgress, convert
from tests.support.glm_fixture import Dims, build_tiny_glm, calibration_inputs

GLM_EXPERTS, GLM_MOE_LAYERS = 288, 42


def rss_anon() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return 0


class Clock(SilentProgress):
    """Finish time (wall, and this process's CPU) of every routed-expert tensor, and the
    shard's start. On a shared box the CPU seconds are the steadier figure: with one torch
    thread they are the work itself, where wall time adds whatever else the box runs."""

    def __init__(self) -> None:
        self.start = (0.0, 0.0)
        self.done: list[tuple[str, float, float]] = []

    def shard_begin(self, shard: ShardInfo) -> None:
        self.start = self.start if self.start[0] else (time.perf_counter(), time.process_time())

    def tensor_done(self, shard: ShardInfo, name: str, nbytes: int) -> None:
        if ".experts." in name and name.endswith("proj.weight"):
            self.done.append((name, time.perf_counter(), time.process_time()))


def per_expert(clock: Clock, which: int) -> tuple[float, float, list[float]]:
    """Steady per-expert seconds (the median after the first expert), the layer's fixed cost
    (what the first expert took beyond it) and every expert's time; ``which``: 1 wall,
    2 CPU."""
    times: list[float] = []
    last = clock.start[which - 1]
    for i in range(0, len(clock.done), 3):
        _name, wall, cpu = clock.done[i + 2]
        end = wall if which == 1 else cpu
        times.append(end - last)
        last = end
    steady = sorted(times[1:])[len(times[1:]) // 2] if len(times) > 1 else times[0]
    return steady, max(times[0] - steady, 0.0), times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--experts", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument(
        "--method",
        default="gptq",
        choices=["gptq", "rtn"],
        help="rtn: round 0 of --calib-from-engine",
    )
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dims = Dims(
        hidden=4096, moe_inter=2048, dense_inter=256, experts=args.experts, layers=1, vocab=512
    )
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        t0 = time.perf_counter()
        model = build_tiny_glm(src, shards=1, dims=dims)
        cfg = json.loads((src / "config.json").read_text())
        cfg["text_config"]["num_experts_per_tok"] = 1
        (src / "config.json").write_text(json.dumps(cfg))
        calib = Path(tmp) / "calib.safetensors"
        save_calibration(calib, calibration_inputs(model, tokens=args.tokens), source="bench")
        del model  # the fixture's own float32 copies are not part of the conversion
        print(
            f"fixture: 1 MoE layer, {args.experts} experts of 3 x 2048x4096 FP8, "
            f"{args.tokens} calibration tokens (built in {time.perf_counter() - t0:.0f}s); "
            f"{args.method.upper()} on {args.device}, {torch.get_num_threads()} CPU threads",
            flush=True,
        )
        clock, peak, stop = Clock(), [rss_anon()], threading.Event()
        before = peak[0]

        def sample() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], rss_anon())
                time.sleep(0.02)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        t0 = time.perf_counter()
        # Round 0 (RTN) runs without calibration: no Hessians, no output-error statistics.
        options = ConvertOptions(
            method=args.method,
            calib=calib if args.method == "gptq" else None,
            pool_gb=0,
            device=args.device,
        )
        convert(src, Path(tmp) / "out", options, progress=clock)
        total = time.perf_counter() - t0
        stop.set()
        sampler.join()
    steady, fixed, times = per_expert(clock, 1)
    cpu_steady, cpu_fixed, cpu_times = per_expert(clock, 2)
    layer = fixed + GLM_EXPERTS * steady
    cpu_layer = cpu_fixed + GLM_EXPERTS * cpu_steady
    gib = 1 << 30
    what = "3 GPTQ solves + down Hessian" if args.method == "gptq" else "3 RTN matrices"
    print(
        f"\nper expert ({what}), median of {len(times) - 1}: {steady:.1f}s wall, "
        f"{cpu_steady:.1f}s CPU; all: {', '.join(f'{t:.1f}' for t in times)}s wall, "
        f"{', '.join(f'{t:.1f}' for t in cpu_times)}s CPU"
    )
    print(
        f"layer fixed cost (routing, gate/up Hessian and its factor): {fixed:.1f}s wall, "
        f"{cpu_fixed:.1f}s CPU; whole conversion {total:.1f}s wall"
    )
    print(
        f"peak RssAnon {peak[0] / gib:.2f} GiB (before the conversion {before / gib:.2f} GiB, "
        f"so the conversion adds {(peak[0] - before) / gib:.2f} GiB)"
    )
    if args.device.startswith("cuda"):
        # On a Spark the GPU's memory is the same 128 GB as the host's: both count.
        print(
            f"peak device memory {torch.cuda.max_memory_allocated() / gib:.2f} GiB "
            f"(torch.cuda.max_memory_allocated)"
        )
    print(
        f"\nprojected, one layer of {GLM_EXPERTS} experts: {layer / 3600:.2f} h; "
        f"{GLM_MOE_LAYERS} MoE layers: {GLM_MOE_LAYERS * layer / 3600:.1f} h "
        f"(+{layer / 3600:.2f} h for the MTP layer's experts); peak memory stays "
        f"{peak[0] / gib:.2f} GiB (one expert at a time)"
    )
    print(
        f"projected from CPU seconds: one layer {cpu_layer / 3600:.2f} h; {GLM_MOE_LAYERS} MoE "
        f"layers: {GLM_MOE_LAYERS * cpu_layer / 3600:.1f} h (the wall figure where nothing "
        f"else shares the cores, with {torch.get_num_threads()} thread(s))"
    )


if __name__ == "__main__":
    main()
