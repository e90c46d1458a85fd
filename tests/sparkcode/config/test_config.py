"""config.toml parsing and permission decisions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.paths import Paths
from sparkcode.agent.core.permissions import Permissions
from sparkcode.agent.tools import BwrapStatus, default_tools
from sparkcode.config import Config, ConfigError, PermissionRule, load_config, parse_config

TOOLS = default_tools()


def test_missing_file_means_defaults() -> None:
    config = load_config(Paths.from_env())
    assert config.permission_mode is None and config.allow == () and config.deny == ()
    assert not config.sandbox_network and config.sandbox_writable == ()


def test_full_file(tmp_path: Path) -> None:
    config = parse_config(
        """
[agent]
permission_mode = "auto-edit"
reasoning_effort = "high"
thinking_token_budget = 4096
max_turns = 7
bash_timeout_s = 30
compact_threshold = 0.6
[permissions]
allow = ["bash:pytest*"]
deny = ["write_file:.env", "git_commit"]
[tui]
notify = "bell"
""",
        tmp_path / "config.toml",
    )
    assert config.notify == "bell" and config.compact_threshold == 0.6
    assert config.permission_mode == "auto-edit" and config.thinking_token_budget == 4096
    assert config.allow == (PermissionRule("bash", "pytest*"),)
    assert config.deny[1] == PermissionRule("git_commit", None)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[agent\n", "malformed TOML"),
        ("[agnet]\n", "unknown section"),
        ("[agent]\nmode = 'ask'\n", "unknown key 'mode'"),
        ("[agent]\npermission_mode = 'yolo'\n", "permission_mode: must be one of"),
        ("[agent]\nthinking_token_budget = -5\n", "thinking_token_budget"),
        ("[agent]\nmax_turns = true\n", "max_turns"),
        ("[permissions]\nallow = 'bash'\n", "allow: must be a list"),
        ("[agent]\ncompact_threshold = 1.5\n", "compact_threshold: must be a number between"),
        ("[tui]\nnotify = 'loud'\n", r"\[tui\] notify: must be one of off, bell, desktop, both"),
    ],
)
def test_bad_config_names_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "config.toml"
    with pytest.raises(ConfigError, match=message) as info:
        parse_config(text, path)
    assert str(path) in str(info.value)


RUST = '[diagnostics.servers.rust]\ncommand = "ra"\nextensions = [".rs"]\n'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[diagnostics]\ncolour = 1\n",
            r": \[diagnostics\] unknown key 'colour' \(known: enabled, max_chars, max_items, "
            r"servers, severity, timeout_s\)$",
        ),
        ("[diagnostics]\nenabled = 1\n", r": \[diagnostics\] enabled: must be true or false"),
        (
            "[diagnostics]\nmax_chars = 'x'\n",
            r": \[diagnostics\] max_chars: must be an integer of at least 200, got 'x'$",
        ),
        (
            "[diagnostics]\nservers = 3\n",
            r": \[diagnostics\] servers: must be tables \[diagnostics.servers.NAME\]",
        ),
        (
            RUST + "port = 1\n",
            r": \[diagnostics.servers.rust\] unknown key 'port' \(known: args, command, "
            r"extensions, language_id, settings\)$",
        ),
        (RUST + "args = [1]\n", r": \[diagnostics.servers.rust\] args: must be a list of strings$"),
        (
            RUST.replace('".rs"', '"rs"'),
            r": \[diagnostics.servers.rust\] extensions: must be a non-empty list like "
            r"\[\".rs\"\]$",
        ),
        (
            '[diagnostics.servers.rust]\nextensions = [".rs"]\n',
            r": \[diagnostics.servers.rust\] command is required$",
        ),
    ],
)
def test_bad_diagnostics_name_file_table_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "config.toml"
    with pytest.raises(ConfigError, match=message) as info:
        parse_config(text, path)
    assert str(info.value).startswith(f"{path}: [diagnostics")


def test_diagnostics_table_read(tmp_path: Path) -> None:
    config = parse_config(
        "[diagnostics]\ntimeout_s = 30\nseverity = 'warning'\n" + RUST, tmp_path / "config.toml"
    )
    diagnostics = config.diagnostics
    assert (diagnostics.timeout_s, diagnostics.severity, diagnostics.max_items) == (
        30.0,
        "warning",
        10,
    )
    assert [(s.name, s.command, s.extensions, s.language_id) for s in diagnostics.servers] == [
        ("python", "basedpyright-langserver", (".py", ".pyi"), "python"),
        ("rust", "ra", (".rs",), "rust"),
    ]


def decide(perms: Permissions, tool: str, **args: Any) -> str:
    t = TOOLS.get(tool)
    assert t is not None
    return perms.decide(t, args, Path.cwd()).verdict


NO_BWRAP = BwrapStatus(None, "bubblewrap (bwrap) is not installed")


def test_permission_modes() -> None:
    ask = Permissions(Config(), mode="ask")
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
    config = Config(
        allow=(PermissionRule.parse("bash:pytest*"), PermissionRule.parse("bash:rm*")),
        deny=(PermissionRule.parse("bash:rm*"), PermissionRule.parse("read_file:.env")),
    )
    perms = Permissions(config, mode="full-auto")
    assert decide(perms, "bash", command="rm -rf /") == "deny"
    assert decide(perms, "read_file", path=".env") == "deny"
    ask = Permissions(config, mode="ask")
    assert decide(ask, "bash", command="pytest -q") == "allow"
    ask.always.add("write_file")
    assert decide(ask, "write_file", path="x") == "allow"


def test_default_mode_is_sandbox_where_bubblewrap_works_else_ask_with_a_notice() -> None:
    perms = Permissions(Config(), bwrap=BwrapStatus("/usr/bin/bwrap"))
    assert perms.mode == "sandbox" and perms.notice is None
    without = Permissions(Config(), bwrap=NO_BWRAP)
    assert without.mode == "ask" and without.sandbox is None
    assert without.notice is not None and "bubblewrap" in without.notice
    assert "not installed" in without.notice
    asked = Permissions(Config(permission_mode="sandbox"), bwrap=NO_BWRAP)
    assert asked.mode == "ask" and asked.notice is not None
    assert asked.set_mode("auto-edit") is None
    mode: str = asked.mode  # re-read: mypy keeps the narrowing from the assert above
    assert mode == "auto-edit"


def test_sandbox_mode_runs_shell_in_the_sandbox_and_asks_to_leave_it() -> None:
    perms = Permissions(Config(), mode="sandbox", bwrap=BwrapStatus("/usr/bin/bwrap"))
    t = TOOLS.get("bash")
    assert t is not None
    made = perms.decide(t, {"command": "make"}, Path.cwd())
    assert made.verdict == "allow" and made.sandboxed
    outside = perms.decide(t, {"command": "curl x", "sandbox": False}, Path.cwd())
    assert outside.verdict == "ask" and not outside.sandboxed
    assert decide(perms, "edit_file", path="a") == "allow"
    assert decide(perms, "git_commit", message="x") == "ask"


def test_plan_mode_runs_only_read_only_calls_whatever_the_rules_say() -> None:
    config = Config(allow=(PermissionRule.parse("bash"), PermissionRule.parse("write_file")))
    perms = Permissions(config, mode="plan", bwrap=NO_BWRAP)
    assert decide(perms, "read_file", path="a") == "allow"
    assert decide(perms, "bash", command="git log --oneline") == "allow"
    assert decide(perms, "bash", command="make") == "deny"
    assert decide(perms, "write_file", path="a") == "deny"
    assert decide(perms, "git_commit", message="x") == "deny"


def test_sandbox_section(tmp_path: Path) -> None:
    text = "[sandbox]\nnetwork = true\nwritable = ['~/.cache', '/opt/x']\n"
    config = parse_config(text, tmp_path / "config.toml")
    assert config.sandbox_network
    assert config.sandbox_writable == (Path("~/.cache").expanduser(), Path("/opt/x"))
    for bad, message in (
        ("network = 'yes'", "network: must be true or false"),
        ("writable = ['rel/dir']", "is not an absolute path"),
        ("writable = 'x'", "must be a list"),
    ):
        with pytest.raises(ConfigError, match=message):
            parse_config(f"[sandbox]\n{bad}\n", tmp_path / "config.toml")
