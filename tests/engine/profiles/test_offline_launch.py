"""Nothing leaves the box unasked: every launch turns vLLM's usage reporting off and, with
local models, the Hugging Face Hub look-ups (issue 38 item 1, docs/connections.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.errors import ProfileError
from engine.paths import Paths
from engine.profiles import (
    HUB_OFFLINE,
    USAGE_STATS_OFF,
    LaunchSpec,
    list_profiles,
    parse_profile,
    render,
    render_nodes,
)
from engine.quant.engine_capture import capture_profile

BASE = '[profile]\nname = "x"\n[model]\npath = "/m"\n'


def _render(text: str, paths: Paths) -> LaunchSpec:
    return render(parse_profile(text, Path("x.toml")), paths)


def test_every_shipped_launch_reports_no_usage_and_asks_no_hub(paths: Paths) -> None:
    seen: dict[str, int] = {}
    for profile in list_profiles(paths):
        if profile.kind == "endpoint":
            assert render(profile, paths).env == {}  # no engine launched
            continue
        launches = render_nodes(profile, paths)
        seen[profile.name] = len(launches)
        for launch in launches:
            where = f"{profile.name} ({launch.node})"
            assert {k: launch.env.get(k) for k in USAGE_STATS_OFF} == USAGE_STATS_OFF, where
            assert {k: launch.env.get(k) for k in HUB_OFFLINE} == HUB_OFFLINE, where
            assert "VLLM_NO_USAGE_STATS=1" in launch.shell_line()
    assert len(seen) >= 5 and 2 in seen.values(), seen  # the two-node profile's worker too


def test_a_profile_turns_usage_reporting_on_only_with_its_own_setting(paths: Paths) -> None:
    on = _render(BASE + "[server]\nusage_stats = true\n", paths)
    assert not set(USAGE_STATS_OFF) & set(on.env)
    off = _render(BASE + "[server]\nusage_stats = false\n", paths)
    assert off.env["VLLM_NO_USAGE_STATS"] == off.env["DO_NOT_TRACK"] == "1"
    with pytest.raises(
        ProfileError, match=r"\[server\] usage_stats: expected true or false, got str"
    ):
        _render(BASE + '[server]\nusage_stats = "yes"\n', paths)


@pytest.mark.parametrize("name", ["VLLM_NO_USAGE_STATS", "DO_NOT_TRACK", "VLLM_DO_NOT_TRACK"])
def test_env_cannot_say_it_a_second_way(paths: Paths, name: str) -> None:
    with pytest.raises(ProfileError, match=rf"\[env\] {name}: .*\[server\] usage_stats"):
        _render(BASE + f'[env]\n{name} = "0"\n', paths)


def test_hub_offline_only_where_every_model_is_local(paths: Paths, tmp_path: Path) -> None:
    assert _render(BASE, paths).env["HF_HUB_OFFLINE"] == "1"
    local = tmp_path / "tok"
    local.mkdir()
    tokenizer = '[server]\nextra_args = ["--tokenizer", "{}"]\n'
    assert _render(BASE + tokenizer.format(local), paths).env["TRANSFORMERS_OFFLINE"] == "1"
    for hub in (
        tokenizer.format("Qwen/Qwen2.5-0.5B"),
        '[server]\nextra_args = ["--hf-config-path=org/model"]\n',
        '[speculative]\nmethod = "eagle"\nmodel = "org/drafter"\nnum_speculative_tokens = 2\n',
    ):
        env = _render(BASE + hub, paths).env
        assert not set(HUB_OFFLINE) & set(env), hub
    assert _render(BASE + '[env]\nHF_HUB_OFFLINE = "0"\n', paths).env["HF_HUB_OFFLINE"] == "0"


def test_the_quantizers_capture_engine_reports_nothing(paths: Paths, tmp_path: Path) -> None:
    base = parse_profile(BASE, Path("x.toml"))
    env = render(capture_profile(base, tmp_path, tmp_path / "cap", 512, 256), paths).env
    assert env["VLLM_NO_USAGE_STATS"] == env["DO_NOT_TRACK"] == env["HF_HUB_OFFLINE"] == "1"
    assert env["SPARKCODE_CAPTURE_DIR"] == str(tmp_path / "cap")
