"""Ctrl+G edits the prompt in $VISUAL/$EDITOR (a real editor script), and
``config.toml``'s ``[keys]`` rebinds the TUI's actions (parsing and a Pilot run)."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from sparkcode.config import KEY_ACTIONS, ConfigError, parse_config
from sparkcode.tui import SparkcodeApp
from sparkcode.tui.editor import NO_EDITOR, edit_text, editor_command
from sparkcode.tui.widgets import ErrorMessage

from .test_pilot import AppFactory, texts, until


def script(tmp_path: Path, name: str, body: str) -> Path:
    """A tiny editor: a shell script run as ``EDITOR FILE``."""
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_edit_text_runs_the_editor_and_reads_the_file_back(tmp_path: Path) -> None:
    appends = script(tmp_path, "appends", 'printf " and more\\n" >> "$1"\n')
    assert edit_text("draft", [str(appends)]).text == "draft and more"
    fails = script(tmp_path, "fails", 'echo changed > "$1"; exit 3\n')
    result = edit_text("draft", [str(fails)])
    assert result.text is None and result.problem is not None
    assert f"{fails} exited with code 3" in result.problem
    removes = script(tmp_path, "removes", 'rm "$1"\n')
    result = edit_text("draft", [str(removes)])
    assert result.text is None and "removed the file" in (result.problem or "")
    missing = edit_text("draft", [str(tmp_path / "no-such-editor")])
    assert missing.text is None and "could not start" in (missing.problem or "")


def test_editor_command_prefers_visual_then_editor() -> None:
    assert editor_command({"VISUAL": "code --wait", "EDITOR": "vi"}) == ["code", "--wait"]
    assert editor_command({"VISUAL": " ", "EDITOR": "nano -w"}) == ["nano", "-w"]
    assert editor_command({}) is None
    with pytest.raises(ValueError, match=r"\$EDITOR .* cannot be read"):
        editor_command({"EDITOR": "vi 'unclosed"})


async def test_ctrl_g_takes_the_edit_into_the_prompt(
    app_factory: AppFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    appends = script(tmp_path, "appends", 'printf "\\nsecond line\\n" >> "$1"\n')
    fails = script(tmp_path, "fails", 'echo lost > "$1"; exit 1\n')
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.setenv("EDITOR", str(appends))
    app, agent, _ = app_factory()
    async with app.run_test(size=(100, 30)) as pilot:
        prompt = app.main.prompt
        prompt.value = "fix the bug"
        await pilot.press("ctrl+g")
        await until(pilot, lambda: prompt.value == "fix the bug\nsecond line")
        assert prompt.cursor_location == prompt.document.end
        monkeypatch.setenv("EDITOR", str(fails))
        await pilot.press("ctrl+g")
        await until(pilot, lambda: any("exited with code 1" in t for t in texts(app, ErrorMessage)))
        assert prompt.value == "fix the bug\nsecond line"  # nothing typed is lost
        assert any(str(fails) in t for t in texts(app, ErrorMessage))
        monkeypatch.delenv("EDITOR")
        await pilot.press("ctrl+g")
        await until(pilot, lambda: NO_EDITOR in texts(app, ErrorMessage))
        assert prompt.value == "fix the bug\nsecond line"
        assert agent.prompts == []  # nothing was sent


def test_keys_table_parses_and_refuses_clearly(tmp_path: Path) -> None:
    source = tmp_path / "config.toml"
    config = parse_config('[keys]\neditor = "f4"\nquit = "ctrl+q, ctrl+d"\n', source)
    assert dict(config.keys) == {"sparkcode.editor": "f4", "sparkcode.quit": "ctrl+q,ctrl+d"}
    assert parse_config("", source).keys == ()
    names = ", ".join(action.name for action in KEY_ACTIONS)
    with pytest.raises(ConfigError) as unknown:
        parse_config('[keys]\nedtor = "ctrl+e"\n', source)
    assert str(unknown.value) == (
        f"{source}: [keys] 'edtor' is not an action that can be bound; the actions are: {names}"
    )
    for text, problem in [
        ('editor = "ctrl+"', "'ctrl+' is not a key"),
        ('editor = "cmd+e"', "'cmd+e' is not a key: the modifiers are"),
        ('editor = "ctrl+bogus"', "'bogus' is no key name"),
        ('editor = "f30"', "function keys are f1 to f24"),
        ('editor = ""', "'' is not a key"),
        ('editor = "f2"', "editor: 'f2' is already the key of engine"),
        ('editor = "ctrl+e"', "editor: 'ctrl+e' is the prompt's own key (cursor line end)"),
        ("editor = 7", 'must be a table of action = "key" strings'),
    ]:
        with pytest.raises(ConfigError, match=re.escape(problem)):
            parse_config(f"[keys]\n{text}\n", source)


async def test_a_keys_override_rebinds_the_action(
    app_factory: AppFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = parse_config('[keys]\neditor = "f4"\nthinking = "f8"\n', tmp_path / "config.toml")
    appends = script(tmp_path, "appends", 'printf " edited" >> "$1"\n')
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.setenv("EDITOR", str(appends))
    app, _, _ = app_factory()
    app = SparkcodeApp(replace(app.settings, keys=config.keys), app.engine, app.agent_factory)
    async with app.run_test(size=(100, 30)) as pilot:
        prompt = app.main.prompt
        prompt.value = "draft"
        await pilot.press("ctrl+g")  # no longer the editor's key
        await pilot.pause(0.1)
        assert prompt.value == "draft"
        await pilot.press("f4")
        await until(pilot, lambda: prompt.value == "draft edited")
        keys = {b.action: b.key for _, b, _, _ in app.main.active_bindings.values()}
        assert keys.get("open_editor") == "f4"
        assert keys.get("toggle_thinking") == "f8"
    assert os.environ.get("EDITOR") == str(appends)
