"""The multi-line prompt, driven with Pilot: pastes kept whole (to the request body),
new lines, chips, binary refused, the height limit."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual import events

from engine.paths import Paths
from sparkcode.tui import SparkcodeApp
from sparkcode.tui.paste import PasteRefused, clean_paste
from sparkcode.tui.scripted import answer_script
from sparkcode.tui.widgets import ErrorMessage, Notice, UserMessage
from tests.support.scripted import Reply, ScriptedServer

from .conftest import live_app
from .test_pilot import AppFactory, texts, until

TRACEBACK = "".join(
    ["Traceback (most recent call last):\n"]
    + [
        f'  File "/srv/app/module_{n}.py", line {10 + n}, in handler_{n}\n'
        f"    result = step_{n}(payload, retries={n})\n"
        for n in range(24)
    ]
    + ["ValueError: payload\tfield 'id' is not an int: '7\u00e9'\n"]
)
"""50 lines, a tab, a non-ASCII character and a final line break."""


def paste(app: SparkcodeApp, text: str) -> None:
    """What the terminal sends for a bracketed paste into the focused prompt."""
    app.main.prompt.post_message(events.Paste(text))


async def test_a_pasted_traceback_reaches_the_request_body_byte_for_byte(
    workspace: Path, paths: Paths
) -> None:
    assert TRACEBACK.count("\n") == 50
    server = ScriptedServer([Reply(content=["it is the id"])])
    app = live_app(workspace, paths, server)
    async with app.run_test(size=(100, 40)) as pilot:
        prompt = app.main.prompt
        await pilot.press(*"why does this fail?")
        await pilot.press("shift+enter")
        # Terminals send pasted line ends as \r (tmux) or \r\n.
        paste(app, TRACEBACK.replace("\n", "\r"))
        await until(pilot, lambda: "[pasted 50 lines #1]" in prompt.value)
        assert prompt.value == "why does this fail?\n[pasted 50 lines #1]"
        await pilot.press("enter")
        await until(pilot, lambda: not app.main.turn_running and bool(server.requests))
        await until(pilot, lambda: not app.main.turn_running)
    user = [m for m in server.requests[0]["messages"] if m["role"] == "user"]
    assert user[-1]["content"] == "why does this fail?\n" + TRACEBACK
    assert prompt.value == ""


async def test_new_lines_chips_unfold_and_history(app_factory: AppFactory) -> None:
    app, agent, _ = app_factory([answer_script("ok")])
    async with app.run_test(size=(100, 40)) as pilot:
        prompt = app.main.prompt
        await pilot.press(*"one", "shift+enter", *"two", "ctrl+j", *"three")
        assert prompt.value == "one\ntwo\nthree"
        assert not app.main.turn_running
        # Up on a lower line moves the cursor, on the first line it walks the history.
        await pilot.press("up")
        assert prompt.cursor_location[0] == 1
        # A short paste goes in as it is; a long one as a chip that Ctrl+O unfolds.
        prompt.value = ""
        paste(app, "a\nb\n")
        await until(pilot, lambda: prompt.value == "a\nb\n")
        prompt.value = "see "
        long = "".join(f"line {n}\n" for n in range(30))
        paste(app, long)
        await until(pilot, lambda: prompt.value == "see [pasted 30 lines #1]")
        await pilot.press("ctrl+o")
        assert prompt.value == "see " + long and prompt.expanded
        await pilot.press("ctrl+o")
        assert prompt.value == "see [pasted 30 lines #1]" and not prompt.expanded
        # The prompt grows with its text up to its limit, then scrolls.
        heights = [prompt.outer_size.height]
        await pilot.press("ctrl+o")
        await pilot.pause()
        heights.append(prompt.outer_size.height)
        assert heights == [3, 14]
        await pilot.press("ctrl+o")
        await pilot.press("enter")
        await until(pilot, lambda: agent.turns_run == 1 and not app.main.turn_running)
        assert agent.prompts == ["see " + long]
        assert texts(app, UserMessage)[-1].startswith("see line 0\nline 1")
        # History brings the chip back, and it still sends whole.
        await pilot.press("up")
        assert prompt.value == "see [pasted 30 lines #1]"
        assert prompt.message == "see " + long
        # Backspace after a chip takes the whole chip.
        await pilot.press("backspace")
        assert prompt.value == "see "


async def test_binary_pastes_are_refused_and_escapes_removed(app_factory: AppFactory) -> None:
    app, _, _ = app_factory()
    async with app.run_test(size=(100, 30)) as pilot:
        prompt = app.main.prompt
        await pilot.press(*"keep me")
        paste(app, "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00")
        await until(pilot, lambda: bool(app.main.query(ErrorMessage)))
        assert (
            "NUL bytes" in texts(app, ErrorMessage)[0]
            and "not inserted" in texts(app, ErrorMessage)[0]
        )
        assert prompt.value == "keep me"  # nothing typed was lost
        paste(app, " \x1b[31mred\x1b[0m error\x07")
        await until(pilot, lambda: prompt.value == "keep me red error")
        await until(pilot, lambda: any("10 terminal escape" in t for t in texts(app, Notice)))


def test_clean_paste_rules() -> None:
    assert clean_paste("a\r\nb\rc\td").text == "a\nb\nc\td"
    assert clean_paste("a\r\nb").removed == 0
    with pytest.raises(PasteRefused, match="control bytes"):
        clean_paste("".join(chr(n) for n in range(1, 9)) * 4 + "text")


async def test_a_paste_while_an_approval_card_has_the_focus_goes_to_the_prompt(
    app_factory: AppFactory,
) -> None:
    from sparkcode.tui.scripted import edit_script
    from sparkcode.tui.widgets import ApprovalCard

    from .test_pilot import DIFF

    app, agent, _ = app_factory([edit_script("src/main.py", DIFF)])
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.press(*"change it", "enter")
        await until(pilot, lambda: isinstance(app.focused, ApprovalCard))
        app.post_message(events.Paste("wait:\nnot this file\n"))  # as the driver does
        await until(pilot, lambda: app.main.prompt.value == "wait:\nnot this file\n")
        assert app.focused is app.main.prompt and not agent.approvals[0].future.done()
