"""config.toml parsing and permission decisions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.paths import Paths
from sparkcode.agent.permissions import Permissions
from sparkcode.agent.tools import default_tools
from sparkcode.config import Config, ConfigError, PermissionRule, load_config, parse_config

TOOLS = default_tools()


def test_missing_file_means_defaults() -> None:
    config = load_config(Paths.from_env())
    assert config.permission_mode == "ask" and config.allow == () and config.deny == ()


def test_full_file(tmp_path: Path) -> None:
    config = parse_config("""
[agent]
permission_mode = "auto-edit"
reasoning_effort = "high"
thinking_token_budget = 4096
max_turns = 7
bash_timeout_s = 30
[permissions]
allow = ["bash:pytest*"]
deny = ["write_file:.env", "git_commit"]
""", tmp_path / "config.toml")
    assert config.permission_mode == "auto-edit" and config.thinking_token_budget == 4096
    assert config.allow == (PermissionRule("bash", "pytest*"),)
    assert config.deny[1] == PermissionRule("git_commit", None)


@pytest.mark.parametrize(("text", "message"), [
    ("[agent\n", "malformed TOML"),
    ("[agnet]\n", "unknown section"),
    ("[agent]\nmode = 'ask'\n", "unknown key 'mode'"),
    ("[agent]\npermission_mode = 'yolo'\n", "permission_mode: must be one of"),
    ("[agent]\nthinking_token_budget = -5\n", "thinking_token_budget"),
    ("[agent]\nmax_turns = true\n", "max_turns"),
    ("[permissions]\nallow = 'bash'\n", "allow: must be a list"),
])
def test_bad_config_names_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "config.toml"
    with pytest.raises(ConfigError, match=message) as info:
        parse_config(text, path)
    assert str(path) in str(info.value)


def decide(perms: Permissions, tool: str, **args: Any) -> str:
    t = TOOLS.get(tool)
    assert t is not None
    return perms.decide(t, args).verdict


def test_permission_modes() -> None:
    ask = Permissions(Config())
    assert decide(ask, "read_file", path="a") == "allow"
    assert decide(ask, "bash", command="git status") == "allow"
    assert decide(ask, "bash", command="make") == "ask"
    assert decide(ask, "edit_file", path="a") == "ask"
    auto_edit = Permissions(Config(), mode="auto-edit")
    assert decide(auto_edit, "edit_file", path="a") == "allow"
    assert decide(auto_edit, "bash", command="make") == "ask"
    assert decide(auto_edit, "git_commit", message="x") == "ask"
    full = Permissions(Config(), mode="full-auto")
    assert decide(full, "bash", command="make") == "allow"


def test_rules_deny_beats_allow_and_mode() -> None:
    config = Config(allow=(PermissionRule.parse("bash:pytest*"),
                           PermissionRule.parse("bash:rm*")),
                    deny=(PermissionRule.parse("bash:rm*"), PermissionRule.parse("read_file:.env")))
    perms = Permissions(config, mode="full-auto")
    assert decide(perms, "bash", command="rm -rf /") == "deny"
    assert decide(perms, "read_file", path=".env") == "deny"
    ask = Permissions(config)
    assert decide(ask, "bash", command="pytest -q") == "allow"
    ask.always.add("write_file")
    assert decide(ask, "write_file", path="x") == "allow"
