"""Prefix-cache page math and where users see it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.pagemath import GLM53_FLASH, PageMath, mamba_block_from_log, prefix_cache_math
from engine.paths import Paths
from engine.profiles import is_hybrid_config, load_profile
from engine.supervisor import EngineStatus
from engine.supervisor._phases import plugin_lines
from sparkcode.cli._engine import _describe


def test_glm_spark_block_follows_from_the_kda_state_and_drafter_k(paths: Paths) -> None:
    # 64 x 128 x 128 fp32 recurrent + 3 x 8192 x (3 + 7) bf16 conv = 4,685,824 B per layer;
    # 128-token MLA units of 656 B/token hold 83,968 B: 56 units = 7168 tokens.
    assert GLM53_FLASH.mamba_page_bytes(7) == 4_685_824
    assert GLM53_FLASH.mamba_block_size(7) == 7168
    math = prefix_cache_math(load_profile("glm53-flash-spark", paths), paths)
    assert math is not None
    assert math.mamba_block_size == 7168
    assert "built-in GLM-5.3-Flash facts" in math.source
    assert math.worst_tail_s == pytest.approx(7168 / 640)
    # The Spark profile keeps prompt-end states (turn_states): the line says what they change.
    # DFlash2 reads the target's hidden states: vLLM keeps the state one 16-token block early.
    assert math.summary() == (
        "turn_states: each prompt's end state is kept (16-token grid), so a turn that extends "
        "the last prompt re-prefills its new tokens plus under 32; other hits land on multiples "
        "of 7168 tokens; at most 8 kept states of 152 MiB each (1.2 GiB); without them a turn "
        "re-prefills up to 11.2 s"
    )
    without = PageMath("p", 7168, "test", 640.0, GLM53_FLASH.name)
    assert without.summary() == (
        "hits land on multiples of 7168 tokens (Mamba/KDA state block); each turn re-prefills "
        "up to 7168 already-seen tokens plus its new ones (up to 11.2 s at ~640 tok/s; the seed "
        "reports ~16 s of prefill per agent turn)"
    )


def test_a_kept_state_is_one_padded_kda_page_per_layer() -> None:
    # Each KDA page is padded to one Mamba block of MLA pages: 7168 x 656 = 4,702,208 B,
    # 34 KDA layers (45 less 11 MLA) = 159,875,072 B = 152.5 MiB per kept state.
    assert GLM53_FLASH.kept_state_bytes(7) == 34 * 7168 * 656 == 159_875_072
    math = PageMath("p", 7168, "test", 640.0, turn_state_unit=16, kept_turn_states=8)
    # A prompt that extends a kept prompt end reuses all of it but under 16 tokens;
    # any other shared prefix still floors to the Mamba block.
    assert math.cached_tokens(5000, prompt_end=True) == 4992
    assert math.cached_tokens(5000) == 0


def test_cached_tokens_floor_to_the_block(paths: Paths) -> None:
    math = PageMath("p", 7168, "test", 640.0)
    assert [math.cached_tokens(n) for n in (5000, 7168, 7169, 20000, 93185)] == [
        0,
        0,
        7168,
        14336,
        93184,
    ]
    assert math.prefill_seconds(6400) == pytest.approx(10.0)


def test_config_json_wins_over_built_in_facts(paths: Paths) -> None:
    model = paths.data_dir / "models" / "glm-5.3-flash-sc2"
    model.mkdir(parents=True)
    config = {
        "text_config": {
            "model_type": "glm5_next_text",
            "layer_types": ["linear_attention"],
            "linear_attn_config": {"num_heads": 32, "head_dim": 128, "short_conv_kernel_size": 4},
        }
    }
    (model / "config.json").write_text(json.dumps(config))
    math = prefix_cache_math(load_profile("glm53-flash-spark", paths), paths)
    assert math is not None and math.source.endswith("config.json")
    assert math.mamba_block_size < 7168  # half the KDA heads, half the state


def test_engine_log_wins_and_non_hybrid_models_have_none(paths: Paths) -> None:
    lines = [
        "(EngineCore pid=1) INFO [interface.py:1] Setting attention block size to 544 tokens "
        "to ensure that attention page size is >= mamba page size.",
        "[sparkcode-plugin] scheduler_fix: active (chunk ends align to the Mamba block of 576 "
        "tokens; cache_config.block_size is 16)",
    ]
    assert mamba_block_from_log(lines) == 576
    assert mamba_block_from_log(["nothing here"]) is None
    cpu = load_profile("cpu-demo", paths)
    assert prefix_cache_math(cpu, paths) is None
    assert prefix_cache_math(cpu, paths, lines) is not None  # the engine knows best
    assert prefix_cache_math(load_profile("endpoint", paths), paths) is None


def test_hybrid_detection() -> None:
    assert is_hybrid_config({"layer_types": ["linear_attention", "full_attention"]})
    assert is_hybrid_config({"text_config": {"linear_attn_config": {"num_heads": 1}}})
    assert not is_hybrid_config({"model_type": "llama"})


def test_status_shows_plugin_and_prefix_rows(tmp_path: Path) -> None:
    log = [
        "(APIServer pid=1) [sparkcode-plugin] scheduler_fix: applied (vLLM 0.32.0: x)",
        "(EngineCore pid=2) [sparkcode-plugin] scheduler_fix: applied (vLLM 0.32.0: x)",
        "(EngineCore pid=2) [sparkcode-plugin] scheduler_fix: not applied (unknown vLLM 9: y)",
    ]
    status = EngineStatus(state="ready", profile="glm53-flash-spark", plugin=plugin_lines(log))
    text = _describe(status, PageMath("glm53-flash-spark", 7168, "test", 640.0, "GLM-5.3-Flash"))
    rows = [line.strip() for line in text.splitlines()]
    assert rows.count("plugin   scheduler_fix: applied (vLLM 0.32.0: x)") == 1
    assert "plugin   scheduler_fix: not applied (unknown vLLM 9: y)" in rows
    assert any(r.startswith("prefix   hits land on multiples of 7168 tokens") for r in rows)


def test_live_plugin_reports_keep_only_the_latest_line() -> None:
    log = [
        "[sparkcode-plugin] w2_quant: applied (registered)",
        "[sparkcode-plugin] fp4_pool: active (2 experts at 4 bits; live coverage 10.0% of 50)",
        "[sparkcode-plugin] w2_quant: applied (registered)",
        "[sparkcode-plugin] fp4_pool: active (2 experts at 4 bits; live coverage 12.5% of 80)",
    ]
    assert plugin_lines(log) == [
        "w2_quant: applied (registered)",
        "fp4_pool: active (2 experts at 4 bits; live coverage 12.5% of 80)",
    ]
