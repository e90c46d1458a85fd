"""Peak memory of `sparkcode quantize` does not grow with the checkpoint, measured side by side.

The converter must run on a 128 GB box against a 306 GiB checkpoint, so it may hold one shard
or one layer at a time, never the model. This bench writes two GLM-5.3-Flash-shaped FP8
checkpoints (the test fixture at larger widths: 16 routed experts of 512x1024 per layer, one
layer per shard) that differ only in depth, converts each with the real CLI in a subprocess,
and samples the process's anonymous resident memory (``RssAnon``: heap and tensors; the
source shards are memory-mapped and their file pages can always be dropped) every 10 ms.

It prints, per checkpoint, its size, its largest shard and the peak, then the ratio of the
peaks against the ratio of the checkpoint sizes. Flat peaks (ratio near 1 while the
checkpoint grows 4x) mean memory is bounded by a shard, not by the model.

    .venv/bin/python -m bench.targets.quantize_memory [--layers 2 8] [--method rtn]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tests.support.glm_fixture import Dims, build_tiny_glm


def rss_anon(pid: int) -> int:
    """Anonymous resident bytes of ``pid`` (Linux), 0 once it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return 0


def convert(src: Path, dst: Path, method: str) -> tuple[int, float]:
    """Run the CLI on ``src``; return its peak anonymous memory and the wall time."""
    exe = Path(sys.executable).with_name("sparkcode")
    cmd = [str(exe), "quantize", str(src), str(dst), "--method", method, "-q"]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = 0

    def sample() -> None:
        nonlocal peak
        while proc.poll() is None:
            peak = max(peak, rss_anon(proc.pid))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    _, err = proc.communicate()
    sampler.join()
    if proc.returncode:
        raise SystemExit(f"sparkcode quantize failed ({proc.returncode}): {err.strip()}")
    return peak, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, nargs=2, default=[2, 8], metavar=("SMALL", "LARGE"))
    ap.add_argument("--method", default="rtn", choices=["rtn"])
    args = ap.parse_args()
    if not Path("/proc/self/status").is_file():
        raise SystemExit("this bench reads /proc/<pid>/status (Linux)")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for layers in args.layers:
            dims = Dims(
                hidden=1024, moe_inter=512, dense_inter=1024, experts=16, layers=layers, vocab=4096
            )
            src = Path(tmp) / f"glm-{layers}"
            print(f"building a {layers}-layer checkpoint ...", flush=True)
            build_tiny_glm(src, shards=layers + 1, dims=dims)
            shards = list(src.glob("*.safetensors"))
            size = sum(p.stat().st_size for p in shards)
            largest = max(p.stat().st_size for p in shards)
            peak, wall = convert(src, Path(tmp) / f"out-{layers}", args.method)
            rows.append((layers, size, largest, peak, wall))
            shutil.rmtree(src)
    mib = 1 << 20
    print(
        f"\n{'layers':>6} {'checkpoint':>11} {'largest shard':>14} {'peak RssAnon':>13} {'time':>7}"
    )
    for layers, size, largest, peak, wall in rows:
        print(
            f"{layers:6d} {size / mib:9.1f} MiB {largest / mib:10.1f} MiB "
            f"{peak / mib:9.1f} MiB {wall:6.1f}s"
        )
    (_, s0, _, p0, _), (_, s1, _, p1, _) = rows
    print(
        f"\ncheckpoint grew {s1 / s0:.2f}x; peak memory grew {p1 / p0:.2f}x "
        f"(by {(p1 - p0) / mib:.1f} MiB)"
    )
    verdict = "PASS" if p1 / p0 < 1 + 0.25 * (s1 / s0 - 1) else "FAIL"
    print(f"{verdict}: peak memory grows by less than a quarter of the checkpoint's growth")


if __name__ == "__main__":
    main()
