"""vLLM serves P12 layers packed, and swaps FP4 pool experts live (real engine).

One tiny Qwen3-MoE checkpoint in sparkcode's format, whose layer-0 FP4 pool (one slot) holds
the expert a skewed prompt uses least and lists the other experts as FP4 candidates, is
served twice through ``sparkcode``'s supervisor: with ``p12_packed`` (every BF16 linear and
the tied embedding kept as P12 codes) and without (decoded at load). Both must swap the cold
expert out live, ``sparkcode engine status`` must show it, and the two must answer alike:
the same traffic makes the same swaps, so any difference is the P12 path's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

pytestmark = pytest.mark.engine

IDS = [1, *([57] * 30), *range(60, 70)]  # one token repeated: a skewed routing


def _layer0_routing(bf16_dir: Path, ids: list[int]) -> torch.Tensor:
    """Pairs routed to each expert of layer 0 for ``ids`` (transformers, fp32)."""
    from transformers import AutoModelForCausalLM

    model: Any = AutoModelForCausalLM.from_pretrained(bf16_dir, dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        logits = model(torch.tensor([ids]), output_router_logits=True).router_logits[0]
    top = logits.reshape(-1, logits.shape[-1]).topk(model.config.num_experts_per_tok).indices
    return torch.bincount(top.reshape(-1), minlength=model.config.num_experts)


def _status_plugin(home: Path) -> list[str]:
    shown = subprocess.run(
        [sys.executable, "-m", "sparkcode", "engine", "status", "--json"],
        env={**os.environ, "SPARKCODE_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    plugin: list[str] = json.loads(shown.stdout)["plugin"]
    return plugin


def _serve(tmp_path: Path, model_path: Path, packed: bool) -> dict[str, Any]:
    from tests.support.engine import run_engine
    from tests.support.tiny_models import write_profile

    name = "tiny-p12" if packed else "tiny-bf16"
    home = tmp_path / name
    features = '"w2_quant", "fp4_pool", "p12_packed"' if packed else '"w2_quant", "fp4_pool"'
    env = 'SPARKCODE_P12_MIN_VALUES = "0"\n' if packed else ""
    write_profile(
        home / "config",
        name,
        model_path,
        8400,
        extra=f"[plugin]\nenabled = true\nfeatures = [{features}]\n[env]\n"
        f'SPARKCODE_FP4_RESELECT_INTERVAL_S = "0"\n{env}',
    )
    with run_engine(home, name) as eng:
        # One step (a prefill): served before any counts were read, so with the offline pool.
        r = httpx.post(
            f"{eng.base_url}/completions",
            timeout=120,
            json={
                "model": eng.model,
                "prompt": IDS,
                "max_tokens": 1,
                "temperature": 0,
                "prompt_logprobs": 0,
            },
        )
        r.raise_for_status()
        # Before its first step the counts above are read and the pool re-chosen.
        g = httpx.post(
            f"{eng.base_url}/completions",
            timeout=120,
            json={
                "model": eng.model,
                "prompt": IDS,
                "max_tokens": 6,
                "temperature": 0,
                "logprobs": 0,
                "ignore_eos": True,
            },
        )
        g.raise_for_status()
        deadline = time.monotonic() + 20
        while True:  # what `sparkcode engine status` shows
            plugin = _status_plugin(home)
            live = [p for p in plugin if p.startswith("fp4_reselect: live")]
            if live or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        log_path = eng.supervisor.log_path()
        assert log_path is not None
        log = log_path.read_text(encoding="utf-8", errors="replace")
    prompt = r.json()["choices"][0]["prompt_logprobs"]
    return {
        "prompt": torch.tensor([prompt[i][str(IDS[i])]["logprob"] for i in range(1, len(IDS))]),
        "gen": g.json()["choices"][0]["logprobs"],
        "live": live,
        "log": log,
    }


def test_packed_p12_and_live_swaps_serve_like_the_decoded_model(tmp_path: Path) -> None:
    from tests.support.w2_models import EXPERT, build_w2_qwen3_moe

    probe = build_w2_qwen3_moe(tmp_path / "probe")
    counts = _layer0_routing(probe.path.parent / "bf16", IDS)
    cold = int(counts.argmin())
    assert counts.max() > 2 * counts[cold], counts
    others = tuple((0, e) for e in range(4) if e != cold)
    model = build_w2_qwen3_moe(tmp_path / "model", pool=((0, cold),), candidates=others)
    packed = _serve(tmp_path, model.path, packed=True)
    plain = _serve(tmp_path, model.path, packed=False)

    # P12: embed_tokens (with the tied lm_head), qkv_proj and o_proj of both layers stay
    # packed; the routers (GateLinear) and the norms are decoded.
    log = packed["log"]
    assert "[sparkcode-plugin] p12_packed: applied" in log
    n_bf16 = sum(
        t.dtype == torch.bfloat16 and not EXPERT.search(n) for n, t in model.original.items()
    )
    assert f"w2_quant: loaded ({n_bf16} P12 tensors decoded" in log
    assert "; 5 BF16 layers kept packed: " in log, log[-3000:]
    assert "kept packed" not in plain["log"]

    # Live swaps: the pool's one slot held the cold expert; the first swap evicted it, and
    # `engine status` reports it. The decoded engine, fed the same traffic, swapped the same.
    for run in (packed, plain):
        assert run["live"], run["log"][-3000:]
        swaps = int(run["live"][0].split("(")[1].split(" swaps")[0])
        assert swaps >= 1 and "3 candidates" in run["live"][0], run["live"]
        first = next(
            line for line in run["log"].splitlines() if "fp4_reselect: live (1 swaps" in line
        )
        assert "layer 0 expert" in first and f"expert {cold} out" in first, first
        assert "fp4_reselect: failed" not in run["log"]
    assert packed["live"] == plain["live"]

    # The same answers: the prompt is prefill (a P12 block unpacked, then the same GEMM on
    # bit-identical weights); the continuation decodes through the GEMV on the codes.
    prefill = float((packed["prompt"] - plain["prompt"]).abs().max())
    decode = float(
        (
            torch.tensor(packed["gen"]["token_logprobs"])
            - torch.tensor(plain["gen"]["token_logprobs"])
        )
        .abs()
        .max()
    )
    print(
        f"packed vs decoded serving: prefill {prefill:.4f} nat, decode {decode:.4f} nat; "
        f"tokens {packed['gen']['tokens']}; {packed['live'][0]}"
    )
    assert prefill < 2e-2
    assert packed["gen"]["tokens"] == plain["gen"]["tokens"]
    assert decode < 5e-2
