"""Profile parsing, validation and rendering."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.errors import ProfileError
from engine.paths import Paths
from engine.profiles import AgentKnobs, list_profiles, load_profile, parse_profile, render


def _parse(text: str) -> object:
    return parse_profile(text, Path("test.toml"))


def test_shipped_profiles_load(paths: Paths) -> None:
    names = [p.name for p in list_profiles(paths)]
    assert names == [
        "cpu-coder",
        "cpu-coder-small",
        "cpu-demo",
        "endpoint",
        "glm53-flash-2spark",
        "glm53-flash-spark",
        "glm53-flash-spark-mtp",
    ]


def test_cpu_demo_renders_eager_cpu_command(paths: Paths) -> None:
    spec = render(load_profile("cpu-demo", paths), paths, python="/py")
    assert spec.argv[:3] == ["/py", "-m", "vllm.entrypoints.openai.api_server"]
    assert "--enforce-eager" in spec.argv
    assert spec.argv[spec.argv.index("--model") + 1] == str(
        paths.models_dir / "smollm2-135m-instruct"
    )
    assert spec.env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    # Threads bound to every core we may run on, none reserved.
    assert spec.env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    assert spec.env["VLLM_CPU_OMP_THREADS_BIND"]
    assert spec.base_url == "http://127.0.0.1:8400/v1"


def test_port_override(paths: Paths) -> None:
    spec = render(load_profile("cpu-demo", paths), paths, port=9123)
    assert spec.argv[spec.argv.index("--port") + 1] == "9123"
    assert spec.base_url.endswith(":9123/v1")


def test_spark_profile_renders_recipe(paths: Paths) -> None:
    spec = render(load_profile("glm53-flash-spark", paths), paths)
    argv = spec.argv
    assert argv[argv.index("--max-model-len") + 1] == "204800"
    spec_cfg = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec_cfg["method"] == "dflash"
    assert spec_cfg["num_speculative_tokens"] == 7
    assert "--enable-prefix-caching" in argv
    assert argv[argv.index("--reasoning-parser") + 1] == "glm45"
    assert argv[argv.index("--tool-call-parser") + 1] == "glm47"
    assert "--enable-auto-tool-choice" in argv
    rc = json.loads(argv[argv.index("--reasoning-config") + 1])
    assert rc["reasoning_end_str"] == "</think>"
    assert spec.env["VLLM_USE_V2_MODEL_RUNNER"] == "1"
    assert spec.env["VLLM_PLUGINS"] == "sparkcode"
    assert "scheduler_fix" in spec.env["SPARKCODE_PLUGIN_FEATURES"].split(",")
    # turn_states: hits every 16 tokens, so vLLM keeps each prompt's end state; 8 kept.
    assert "turn_states" in spec.env["SPARKCODE_PLUGIN_FEATURES"].split(",")
    assert argv[argv.index("--prefix-match-unit") + 1] == "16"
    assert spec.env["SPARKCODE_KEPT_TURN_STATES"] == "8"
    # GLM-5.3-Flash is multimodal: the profile serves the vision tower (no text-only switch,
    # no zero image limit), and its budget counts it (bench/targets/p12_memory.py: 1.05 GiB).
    assert "--language-model-only" not in argv
    assert not any(a.startswith("--limit-mm-per-prompt") for a in argv)


SPARK_BASE = """
[profile]
name = "x"
[model]
path = "/m"
[speculative]
method = "dflash"
model = "/d"
num_speculative_tokens = {k}
"""


def test_dflash_rejects_more_than_block_minus_one() -> None:
    _parse(SPARK_BASE.format(k=7))
    with pytest.raises(ProfileError, match="exceeds the DFlash drafter's block of 8"):
        _parse(SPARK_BASE.format(k=8))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[profile\nname=", "malformed TOML"),
        ('[profile]\nname = "x"\n[bogus]\n', "unknown section"),
        (
            '[profile]\nname = "x"\n[model]\npath = "/m"\n[server]\nport = "80"\n',
            "expected an integer",
        ),
        ('[profile]\nname = "x"\n[model]\npath = "/m"\n[server]\nport = 70000\n', "at most 65535"),
        ('[profile]\nname = "x"\n[model]\n', "exactly one of"),
        (
            '[profile]\nname = "x"\n[model]\npath = "/m"\nbuiltin = "smollm2-135m-instruct"\n',
            "exactly one of",
        ),
        (
            '[profile]\nname = "x"\n[model]\npath = "/m"\n[server]\n'
            "enable_auto_tool_choice = true\n",
            "needs tool_call_parser",
        ),
        (
            '[profile]\nname = "x"\n[model]\npath = "/m"\n[plugin]\nfeatures = ["nope"]\n',
            "unknown feature",
        ),
        (
            '[profile]\nname = "x"\n[model]\npath = "/m"\n[plugin]\nkept_turn_states = 4\n',
            "kept_turn_states needs the turn_states feature",
        ),
        (
            '[profile]\nname = "x"\n[model]\npath = "/m"\n[plugin]\nfeatures = ["turn_states"]\n'
            "kept_turn_states = 0\n",
            "kept_turn_states",
        ),
        (
            '[profile]\nname = "x"\n[model]\npath = "/m"\n[server]\nenable_prefix_caching = false\n'
            '[plugin]\nfeatures = ["turn_states"]\n',
            "enable_prefix_caching is false",
        ),
        (
            '[profile]\nname = "x"\n[model]\npath = "/m"\n[server]\nenforce_eager = 1\n',
            "expected true or false",
        ),
        ('[profile]\nname = "x"\nkind = "endpoint"\n[endpoint]\nbase_url = "ftp://x"\n', "http"),
        (
            '[profile]\nname = "x"\nkind = "endpoint"\n[endpoint]\nbase_url = "http://h/v1"\n'
            'api_key_env = "sk-abc123-secret"\n',
            "name an environment variable",
        ),
        (
            '[profile]\nname = "x"\n[model]\npath = "/m"\n[agent]\nreasoning_effort = "huge"\n',
            "reasoning_effort",
        ),
    ],
)
def test_invalid_profiles_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(ProfileError, match=message) as info:
        _parse(text)
    assert "test.toml" in str(info.value)


def test_unknown_profile_lists_known(paths: Paths) -> None:
    with pytest.raises(ProfileError, match="unknown profile 'nope'.*cpu-demo"):
        load_profile("nope", paths)


def test_user_profile_overrides_and_must_match_name(paths: Paths) -> None:
    paths.profiles_dir.mkdir(parents=True)
    (paths.profiles_dir / "cpu-demo.toml").write_text(
        '[profile]\nname = "cpu-demo"\n[model]\npath = "/models/x"\n'
    )
    assert load_profile("cpu-demo", paths).model_path == "/models/x"
    (paths.profiles_dir / "mine.toml").write_text('[profile]\nname = "other"\n[model]\npath="/m"\n')
    with pytest.raises(ProfileError, match="name is 'other'"):
        load_profile("mine", paths)


def test_endpoint_profile_keeps_key_out_of_render(
    paths: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-super-secret")
    spec = render(load_profile("endpoint", paths), paths)
    assert spec.argv == []
    assert spec.api_key_env == "OPENAI_API_KEY"
    assert "sk-super-secret" not in repr(spec)


def test_secret_env_is_redacted_in_shell_line(paths: Paths) -> None:
    prof = _parse('[profile]\nname = "x"\n[model]\npath = "/m"\n[env]\nHF_TOKEN = "hf_abc"\n')
    spec = render(prof, paths)  # type: ignore[arg-type]
    assert spec.env["HF_TOKEN"] == "hf_abc"
    assert "hf_abc" not in spec.shell_line()
    assert "HF_TOKEN='<redacted>'" in spec.shell_line()


def test_small_model_mode_is_the_cpu_demo_default_and_a_run_can_turn_it_off(paths: Paths) -> None:
    # Measured (docs/agent.md, bench/studies/small_model_suite.py): SmolLM2 completed 2/18
    # tasks in small-model mode and 0/18 without, so cpu-demo keeps it on; the
    # Spark model drives the API's tools itself.
    from sparkcode.config import Config
    from sparkcode.start import Connection, SessionOptions, session_settings

    cpu = load_profile("cpu-demo", paths)
    assert load_profile("glm53-flash-spark", paths).agent.structured_tools is False

    def structured(options: SessionOptions) -> bool:
        conn = Connection(
            base_url="http://127.0.0.1:8400/v1",
            model="smollm2-135m-instruct",
            api_key_env=None,
            max_model_len=8192,
            profile="cpu-demo",
            managed=True,
            profile_spec=cpu,
        )
        return session_settings(Config(), conn, options).structured_tools

    assert structured(SessionOptions()) is True
    assert structured(SessionOptions(knobs=AgentKnobs(structured_tools=False))) is False


def test_every_vllm_profile_starts_the_engine_without_free_whitespace(paths: Paths) -> None:
    # vLLM 0.32's xgrammar backend ignores the request's disable_any_whitespace
    # and reads the engine's; without the flag SmolLM2's steps came indented, and
    # run --output-schema's answer was padded until the context ran out.
    def config(text: str) -> list[str]:
        argv = render(_parse(text), paths).argv  # type: ignore[arg-type]
        return [argv[i + 1] for i, arg in enumerate(argv) if arg == "--structured-outputs-config"]

    argv = render(load_profile("cpu-demo", paths), paths).argv
    flag = argv[argv.index("--structured-outputs-config") + 1]
    assert json.loads(flag) == {"backend": "xgrammar", "disable_any_whitespace": True}
    base = '[profile]\nname = "x"\n[model]\npath = "/m"\n'
    assert config(base) == [flag]
    assert config(base + "[agent]\nstructured_tools = true\n") == [flag]
    own = '[server]\nextra_args = ["--structured-outputs-config", "{}"]\n'
    assert config(base + own + "[agent]\nstructured_tools = true\n") == ["{}"]
    inline = '[server]\nextra_args = ["--structured-outputs-config={}"]\n'
    assert config(base + inline) == []
    for profile in list_profiles(paths):
        if profile.kind == "vllm":
            assert config(profile.source.read_text()) == [flag], profile.name
