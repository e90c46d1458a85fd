"""The MoE benches run on a CPU: the traffic bench's model equals its measurement, and the
GPU check refuses a machine without CUDA but runs its correctness harness interpreted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernels import _triton

ROOT = Path(__file__).resolve().parents[2]
needs_triton = pytest.mark.skipif(not _triton.HAVE_TRITON, reason="no Triton")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


@needs_triton
def test_traffic_bench_model_matches_the_interpreters_loads() -> None:
    proc = _run("bench/moe_traffic.py", "--quick")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    out = proc.stdout
    rows = [line for line in out.splitlines() if line.startswith(("decode, 1", "k=7 verify"))]
    assert len(rows) == 2 and all(r.split()[-1] == "same" for r in rows), out
    assert all(int(r.split()[-7]) == 3 for r in rows), out  # launches per MoE layer
    assert "launches: _gate_up_kernel, _down_kernel, _sum_kernel" in out
    assert "ESTIMATE, not measured" in out and out.rstrip().endswith("PASS")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here")
def test_gpu_check_says_it_needs_a_gpu() -> None:
    proc = _run("bench/gpu_check.py")
    assert proc.returncode == 2
    assert "no CUDA device here; this check needs one CUDA GPU (nothing was checked)" in \
        proc.stderr


@needs_triton
def test_gpu_check_correctness_harness_runs_interpreted() -> None:
    proc = _run("bench/gpu_check.py", "--interpret")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    names = [line.split(":")[0] for line in lines if line.startswith(("PASS", "FAIL"))]
    for kernel in ("w2_dequant", "w2_gemv", "w2_matmul", "p12_unpack", "p12_gemv",
                   "nvfp4_dequant", "w2_fused_moe 1x8", "w2_fused_moe 8x8",
                   "w2_fused_moe 40x8"):
        assert f"PASS {kernel}" in names, proc.stdout
    assert "0 failed" in lines[-1]
