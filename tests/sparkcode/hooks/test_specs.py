"""Hook declarations: ``config.toml``'s ``[[hooks.EVENT]]`` checked entry by entry, and a
project's ``.sparkcode/hooks.toml`` and ``.claude/settings.json`` (Claude's tool names)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkcode.config import parse_config
from sparkcode.hooks import HookConfigError, parse_claude_hooks, project_hooks


def test_config_toml_hooks_and_their_bad_entries(tmp_path: Path) -> None:
    cfg = parse_config(
        '[[hooks.PostToolUse]]\nmatcher = "edit_file|write_file"\n'
        'command = "ruff format ."\ntimeout_s = 30\n',
        tmp_path / "c.toml",
    )
    (spec,) = cfg.hooks
    assert spec.event == "PostToolUse" and spec.timeout_s == 30 and spec.matches("edit_file")
    assert not spec.matches("multi_edit") and not spec.matches("bash")
    for bad, why in [
        ('[[hooks.PostTool]]\ncommand = "x"\n', "unknown hook event"),
        ('[[hooks.Stop]]\ncommand = ""\n', "command must be"),
        ('[[hooks.Stop]]\ncommand = "x"\nmatcher = "("\n', "not a valid regex"),
        ('[[hooks.Stop]]\ncommand = "x"\ntimeout_s = 0\n', "timeout"),
        ('[[hooks.Stop]]\ncommand = "x"\nwhen = 1\n', "unknown key 'when'"),
    ]:
        with pytest.raises(HookConfigError, match=why):
            parse_config(bad, tmp_path / "c.toml")


def test_claude_settings_hooks_are_read_with_claude_tool_names(workspace: Path) -> None:
    (workspace / ".claude").mkdir()
    (workspace / ".claude" / "settings.json").write_text(
        json.dumps(
            {
                "hooks": {
                    "PostToolUse": [
                        {
                            "matcher": "Edit|Write",
                            "hooks": [
                                {
                                    "type": "command",
                                    "command": "npx prettier --write .",
                                    "timeout": 20,
                                }
                            ],
                        }
                    ]
                }
            }
        )
    )
    (workspace / ".sparkcode").mkdir()
    (workspace / ".sparkcode" / "hooks.toml").write_text('[[Stop]]\ncommand = "make test"\n')
    found = project_hooks(workspace)
    assert [(s.event, s.source) for s in found] == [
        ("Stop", ".sparkcode/hooks.toml"),
        ("PostToolUse", ".claude/settings.json"),
    ]
    post = found[1]
    assert post.matches("edit_file") and post.matches("write_file") and post.timeout_s == 20
    assert not post.matches("bash")
    with pytest.raises(HookConfigError, match='only "type": "command"'):
        parse_claude_hooks({"Stop": [{"hooks": [{"type": "http", "url": "x"}]}]}, "s.json")
