"""Custom slash commands: Markdown files, $ARGUMENTS, /help, completion, the TUI, run."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.paths import Paths
from sparkcode.cli._run import EXIT_OK, RunRequest, run_headless
from sparkcode.custom_commands import load_commands
from sparkcode.start import SessionOptions
from sparkcode.tui import commands as tui_commands
from sparkcode.tui.completion import suggest_completion
from sparkcode.tui.scripted import ScriptedAgent, answer_script
from tests.support.http_server import serve, url
from tests.support.scripted import Reply


def write(root: Path, name: str, text: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{name}.md"
    path.write_text(text)
    return path


@pytest.fixture
def registered() -> Iterator[None]:
    yield
    tui_commands.register_custom(load_commands(Path("/nonexistent"), None))  # drop them


def test_arguments_are_substituted_and_front_matter_read(workspace: Path, tmp_path: Path) -> None:
    write(
        workspace / ".sparkcode/commands",
        "review",
        "---\ndescription: Review a path for bugs\nargument-hint: PATH\n---\n"
        "Review $ARGUMENTS for bugs; start with $1.\n",
    )
    write(workspace / ".claude/commands", "review", "shadowed\n")
    write(workspace / ".claude/commands", "fix", "Fix the failing tests.\n")
    write(tmp_path / "user", "explain", "Explain $2 then $1.\n")
    write(tmp_path / "user", "bad name", "x\n")
    write(tmp_path / "user", "empty", "---\ndescription: nothing\n---\n\n")
    found = load_commands(workspace, tmp_path / "user")
    assert [c.name for c in found.commands] == ["explain", "fix", "review"]
    review = found.get("review")
    assert review is not None and review.description == "Review a path for bugs"
    assert review.usage == "/review PATH"
    assert review.expand(" src/a.py  src/b.py ") == (
        "Review src/a.py  src/b.py for bugs; start with src/a.py."
    )
    assert found.expand_line("/fix now please") == (
        "Fix the failing tests.\n\nARGUMENTS: now please"
    )
    assert found.expand_line("/fix") == "Fix the failing tests."
    assert found.expand_line("/explain a") == "Explain  then a."
    assert found.expand_line("/nope x") is None and found.expand_line("plain") is None
    fix = found.get("fix")
    assert fix is not None and fix.description == "Fix the failing tests."
    notes = "\n".join(found.notes)
    assert "bad name.md skipped: its name must be" in notes
    assert "empty.md skipped: it has no prompt text" in notes


async def test_custom_commands_appear_in_help_completion_and_send_their_prompt(
    workspace: Path, paths: Paths, registered: None
) -> None:
    from sparkcode.tui.widgets import UserMessage
    from tests.sparkcode.tui.test_conversation_commands import app_with
    from tests.sparkcode.tui.test_pilot import texts, type_line, until

    write(
        workspace / ".sparkcode/commands",
        "review",
        "---\ndescription: Review a path\n---\nReview $ARGUMENTS carefully.\n",
    )
    write(workspace / ".sparkcode/commands", "help", "shadows a built-in\n")
    tui_commands.register_custom(load_commands(workspace, None))
    text = tui_commands.help_markdown()
    assert "| `/review` | Review a path (custom) |" in text
    assert "/help is a built-in command" in text
    assert suggest_completion("/rev", None) == "/review"  # type: ignore[arg-type]
    agent = ScriptedAgent([answer_script("looked")])
    app, _ = app_with(workspace, paths, agent)
    async with app.run_test(size=(100, 36)) as pilot:
        await type_line(pilot, "/review src/main.py")
        await until(pilot, lambda: agent.prompts == ["Review src/main.py carefully."])
        await until(pilot, lambda: "Review src/main.py carefully." in texts(app, UserMessage))


async def test_run_sends_a_custom_command_as_its_prompt(workspace: Path) -> None:
    write(workspace / ".claude/commands", "summarise", "Summarise $ARGUMENTS in one line.\n")
    with serve([Reply(content=["ok"])]) as server:
        code = await run_headless(
            RunRequest(
                prompt="/summarise README.md",
                workspace=workspace,
                endpoint=url(server),
                session=SessionOptions(record=False),
            ),
            out=io.StringIO(),
            err=io.StringIO(),
        )
    assert code == EXIT_OK
    assert server.requests[0]["messages"][-1]["content"] == "Summarise README.md in one line."
