"""The embedded default engine is a working model, not just a healthy process."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import httpx
import pytest

from engine.models import convert_gguf, smollm2_gguf_path
from sparkcode.agent.tools import default_tools
from sparkcode.cli._run import EXIT_ERROR, RunOptions, run_headless
from tests.support.engine import run_engine

pytestmark = pytest.mark.engine


def test_cpu_demo_knows_the_capital_of_france_and_steps_in_small_model_mode(
        tmp_path: Path) -> None:
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
                # SmolLM2-135M from a Q4_1 GGUF is weak: asked "What is the capital of
                # France?" its first token is "The" by 0.1 nat over "L", which bf16
                # rounding can flip. This wording leads by over 2 nats, so the test
                # checks the model works, not which side of a coin flip it lands on.
                "messages": [{"role": "user",
                              "content": "Complete the sentence: The capital of France is"}],
            },
            timeout=120,
        )
        resp.raise_for_status()
        answer = resp.json()["choices"][0]["message"]["content"]
        # Small-model mode on the real engine: vLLM's structured outputs (xgrammar on
        # the CPU) hold every reply to the step schema, so each call SmolLM2 makes
        # names a real tool with its required arguments, and nothing needs salvage.
        workspace = tmp_path / "ws"
        workspace.mkdir()
        (workspace / "README.md").write_text("The secret word is pelican.\n")
        out, err = io.StringIO(), io.StringIO()
        code = asyncio.run(run_headless(RunOptions(
            prompt="What is the secret word in README.md?", workspace=workspace,
            as_json=True, auto=True, endpoint=engine.base_url, max_turns=3, max_tokens=96,
            record=False, structured_tools=True), out=out, err=err))
    assert "Paris" in answer
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    assert code != EXIT_ERROR, (err.getvalue(), events)
    assert not [e for e in events if e["type"] in ("AgentError", "Notice")
                and e.get("code") in ("request_field_dropped", "tool_call_unreadable")]
    finished = [e for e in events if e["type"] == "TurnFinished"]
    assert finished and finished[0]["completion_tokens"] > 0
    tools = default_tools()
    for call in [e for e in events if e["type"] == "ToolCallStarted"]:
        tool = tools.get(call["name"])
        assert tool is not None and all(r in call["arguments"] for r in tool.required), call
    if finished[0]["reason"] == "stop":  # the last step was {"answer": ...}
        assert not finished[0]["content"].lstrip().startswith('{"answer"')
