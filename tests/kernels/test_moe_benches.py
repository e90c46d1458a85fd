"""The MoE benches run on a CPU: the traffic bench's model equals its measurement, and the
GPU check refuses a machine without CUDA but runs its correctness harness interpreted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernels import _triton
from tests.support import ROOT

needs_triton = pytest.mark.skipif(not _triton.HAVE_TRITON, reason="no Triton")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


@needs_triton
def test_traffic_bench_model_matches_the_interpreters_loads() -> None:
    proc = _run("-m", "bench.targets.moe_traffic", "--quick")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    out = proc.stdout
    rows = [line for line in out.splitlines() if line.startswith(("decode, 1", "k=7 verify"))]
    assert len(rows) == 2 and all(r.split()[-1] == "same" for r in rows), out
    assert all(int(r.split()[-7]) == 3 for r in rows), out  # launches per MoE layer
    assert "launches: _gate_up_kernel, _down_kernel, _sum_kernel" in out
    assert "ESTIMATE, not measured" in out and out.rstrip().endswith("PASS")
    # Per rank at TP=2 / EP=2: measured at 1 token, GLM's bytes per layer and rank.
    assert "TP=2 1 token     rank 0: launch bytes" in out, out
    assert "EP=2 1 token     rank 0 (" in out, out
    assert out.count("GLM-5.3-Flash") >= 2 and "EP=2 busier rank" in out, out


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here")
def test_gpu_check_says_it_needs_a_gpu() -> None:
    proc = _run("-m", "bench.targets.gpu_check")
    assert proc.returncode == 2
    assert "no CUDA device here; this check needs one CUDA GPU (nothing was checked)" in proc.stderr


@needs_triton
def test_gpu_check_correctness_harness_runs_interpreted() -> None:
    proc = _run("-m", "bench.targets.gpu_check", "--interpret")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    names = [line.split(":")[0] for line in lines if line.startswith(("PASS", "FAIL"))]
    for kernel in (
        "w2_dequant",
        "w2_gemv",
        "w2_matmul",
        "p12_unpack",
        "p12_gemv",
        "nvfp4_dequant",
        "w2_fused_moe 1x8",
        "w2_fused_moe 8x8",
        "w2_fused_moe 40x8",
    ):
        assert f"PASS {kernel}" in names, proc.stdout
    assert "0 failed" in lines[-1]


def test_decode_projection_reads_the_static_checks_share(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The projection reads the routed experts at the share the static check predicted for
    the current kernels (and refuses figures made from other sources)."""
    from bench.targets import moe_traffic as mt
    from bench.targets.kernel_static.build import kernels_hash

    path = tmp_path / "static.json"
    shares = {"moe decode T=1": {"w2": 0.5}, "moe decode T=8": {"w2": 0.25, "fp4": 0.9}}
    path.write_text(
        json.dumps({"kernels_hash": kernels_hash(), "triton": "3.9.0", "decode_share": shares})
    )
    got, source = mt.static_shares(path)
    assert got == {1: 0.5, 8: 0.25} and "static check" in source
    mt.print_projection(got, source)
    out = capsys.readouterr().out
    assert "predicted share: 50% at 1 token, 25% at 8 tokens (k=7 verify)" in out
    assert "left out: attention compute" in out and "the host step" in out and "drafter" in out
    rows = [line for line in out.splitlines() if "coverage   0%, bf16 linears decoded" in line]
    ceiling, predicted = (float(r.split("tok/s;")[0].split()[-1]) for r in rows)
    other, experts = mt.projection(0.0, None)["bf16 linears decoded"]
    bw = mt.GB10_GBPS * 1e9
    assert ceiling == pytest.approx(bw / (other + experts), abs=0.05)
    assert predicted == pytest.approx(1 / (other / bw + experts / (bw * 0.5)), abs=0.05)
    path.write_text(json.dumps({"kernels_hash": "other", "decode_share": shares}))
    assert mt.static_shares(path) == (
        None,
        f"{path} was made from other kernels/ sources (rerun the static check)",
    )
    assert mt.static_shares(tmp_path / "missing.json")[0] is None
