"""The embedded default engine is a working model, not just a healthy process."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from engine.models import convert_gguf, smollm2_gguf_path
from tests.support.engine import run_engine

pytestmark = pytest.mark.engine


def test_cpu_demo_knows_the_capital_of_france(tmp_path: Path) -> None:
    # Converted through the same code path `sparkcode engine start` uses.
    home = tmp_path / "home"
    target = home / "data" / "models" / "smollm2-135m-instruct"
    convert_gguf(smollm2_gguf_path(), target)
    assert (target / "model.safetensors").is_file()
    assert not list(target.parent.glob(".smollm2-*")), "staging directory left behind"
    with run_engine(home, "cpu-demo") as engine:
        resp = httpx.post(
            f"{engine.base_url}/chat/completions",
            json={
                "model": engine.model, "temperature": 0, "max_tokens": 24,
                "messages": [{"role": "user", "content": "What is the capital of France?"}],
            },
            timeout=120,
        )
        resp.raise_for_status()
        answer = resp.json()["choices"][0]["message"]["content"]
    assert "Paris" in answer
