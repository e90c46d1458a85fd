"""Project instructions (AGENTS.md / CLAUDE.md), the /init draft, and the sampling settings."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from engine.errors import ProfileError
from engine.paths import Paths
from engine.profiles import load_profile, parse_profile
from sparkcode.agent import DEFAULT_SYSTEM_PROMPT
from sparkcode.agent.extensions.agents_md import draft_agents_md
from sparkcode.agent.extensions.instructions import load_instructions
from sparkcode.config import ConfigError, parse_config
from sparkcode.start import resolve_target, session_seed


@pytest.fixture
def nested(tmp_path: Path) -> Path:
    """repo/ (a git repository) / pkg / sub (the workspace); AGENTS.md above the repo too."""
    (tmp_path / "AGENTS.md").write_text("outside the repository: never read\n")
    repo = tmp_path / "repo"
    (repo / "pkg" / "sub").mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    (repo / "AGENTS.md").write_text("root rules\n")
    (repo / "CLAUDE.md").write_text("ignored: AGENTS.md wins here\n")
    (repo / "pkg" / "CLAUDE.md").write_text("pkg rules (CLAUDE.md, no AGENTS.md here)\n")
    (repo / "pkg" / "sub" / "AGENTS.md").write_text("sub rules\n")
    return repo / "pkg" / "sub"


def test_files_up_to_the_repository_root_nearest_last(nested: Path) -> None:
    loaded = load_instructions(nested)
    assert [f.shown for f in loaded.files] == ["../../AGENTS.md", "../CLAUDE.md", "AGENTS.md"]
    assert loaded.notes == ()
    prompt = loaded.system_prompt(DEFAULT_SYSTEM_PROMPT)
    assert prompt.startswith(DEFAULT_SYSTEM_PROMPT + "\n\n# Project instructions")
    assert prompt.index("root rules") < prompt.index("pkg rules") < prompt.index("sub rules")
    assert "never read" not in prompt and "ignored" not in prompt
    assert load_instructions(nested).system_prompt("x") == prompt.replace(
        DEFAULT_SYSTEM_PROMPT, "x", 1
    )  # the same bytes every time: the prefix stays cached
    assert "../../AGENTS.md, ../CLAUDE.md, AGENTS.md" in loaded.summary()


def test_no_file_leaves_the_system_prompt_untouched(tmp_path: Path) -> None:
    loaded = load_instructions(tmp_path)
    assert (
        loaded.files == () and loaded.system_prompt(DEFAULT_SYSTEM_PROMPT) == DEFAULT_SYSTEM_PROMPT
    )
    assert "no project instructions" in loaded.summary()


def test_a_file_that_is_not_utf8_is_left_out_with_a_note(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_bytes(b"caf\xe9 rules in latin-1\n")
    loaded = load_instructions(tmp_path)
    assert loaded.files == ()
    assert loaded.notes == (
        "AGENTS.md is not UTF-8 text (byte 0xe9 at offset 3); not loaded: save it as UTF-8",
    )


def test_a_huge_file_is_cut_at_the_cap_and_the_nearest_keeps_its_room(nested: Path) -> None:
    root = nested.parents[1] / "AGENTS.md"
    root.write_text("line of the root file\n" * 50_000)  # ~1 MiB
    loaded = load_instructions(nested, max_bytes=4096)
    files = {f.shown: f for f in loaded.files}
    assert files["AGENTS.md"].text == "sub rules\n" and not files["AGENTS.md"].cut
    big = files["../../AGENTS.md"]
    assert big.cut and big.size == root.stat().st_size
    assert len(big.text.encode()) < 4096 + 100 and "was cut: over the size cap" in big.text
    assert any("../../AGENTS.md is 1100000 bytes; only its first" in n for n in loaded.notes)
    prompt = loaded.system_prompt("base")
    assert len(prompt.encode()) < 4096 + 1000


def test_a_file_past_the_cap_is_named_as_not_loaded(nested: Path) -> None:
    loaded = load_instructions(nested, max_bytes=10)  # "sub rules\n" is exactly 10 bytes
    assert [f.shown for f in loaded.files] == ["AGENTS.md"]
    assert [n.split(" was")[0] for n in loaded.notes] == ["../CLAUDE.md", "../../AGENTS.md"]


def test_the_start_target_reads_them_once(nested: Path, paths: Paths) -> None:
    target = resolve_target(nested, paths, endpoint="http://h:1")
    assert [f.shown for f in target.instructions.files][-1] == "AGENTS.md"


def test_init_drafts_from_what_the_repository_shows(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("# Demo\n\nA demo project that adds numbers.\n")
    (tmp_path / "Makefile").write_text("test:\n\tpytest\nlint:\n\truff check .\nX := 1\n")
    (tmp_path / "pyproject.toml").write_text("[tool.ruff]\nline-length = 100\n")
    (tmp_path / "src").mkdir()
    (tmp_path / ".venv").mkdir()
    draft = draft_agents_md(tmp_path)
    assert "A demo project that adds numbers." in draft
    assert "- `make test`: Makefile target" in draft and "- `make lint`" in draft
    assert "- `ruff check .`: lint" in draft and "- `src/`" in draft
    assert ".venv" not in draft and "make X" not in draft


def test_sampling_and_seed_settings_parse_and_fail_by_name(tmp_path: Path) -> None:
    source = tmp_path / "config.toml"
    config = parse_config("[agent]\ntemperature = 1\ntop_p = 0.9\nseed = 42\n", source)
    assert (config.temperature, config.top_p, config.seed) == (1.0, 0.9, 42)
    assert parse_config('[agent]\nseed = "off"\n', source).seed == "off"
    assert parse_config("", source).seed == "random"
    assert session_seed("off") is None and session_seed(7) == 7
    assert isinstance(session_seed("random"), int)
    for bad, key in (
        ("temperature = 3", "temperature"),
        ("top_p = 0", "top_p"),
        ('seed = "sometimes"', "seed"),
        ("seed = -1", "seed"),
    ):
        with pytest.raises(ConfigError, match=rf"\[agent\] {key}:"):
            parse_config(f"[agent]\n{bad}\n", source)


def test_profile_agent_settings(paths: Paths, tmp_path: Path) -> None:
    assert load_profile("glm53-flash-spark", paths).agent.thinking_history is True
    assert load_profile("cpu-demo", paths).agent.thinking_history is False
    text = (
        '[profile]\nname = "x"\nkind = "endpoint"\n[endpoint]\nbase_url = "http://h"\n'
        "[agent]\ntemperature = 0.7\ntop_p = 0.8\nthinking_history = true\n"
    )
    agent = parse_profile(text, tmp_path / "x.toml").agent
    assert (agent.temperature, agent.top_p, agent.thinking_history) == (0.7, 0.8, True)
    with pytest.raises(ProfileError, match="temperature must be between 0 and 2"):
        parse_profile(text.replace("0.7", "9.0"), tmp_path / "x.toml")
