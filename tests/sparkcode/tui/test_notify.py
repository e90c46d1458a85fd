"""Calling the user back to an unfocused terminal, driven with Pilot: the bell and OSC
9/777 notifications when a turn ends or an approval waits, only while blurred."""

from __future__ import annotations

import asyncio

from textual import events

from sparkcode.tui import SparkcodeApp
from sparkcode.tui.notify import notification_sequences
from sparkcode.tui.scripted import answer_script, edit_script

from .test_pilot import DIFF, AppFactory, type_line, until


def capture(app: SparkcodeApp) -> list[str]:
    """What the app writes to the terminal (the headless driver drops it)."""
    written: list[str] = []
    assert app._driver is not None
    app._driver.write = written.append  # type: ignore[method-assign,assignment]
    return written


def rung(written: list[str]) -> list[str]:
    return [w for w in written if "\a" in w or "\x1b]9;" in w]


async def test_a_blurred_terminal_is_called_back_a_focused_one_is_not(
    app_factory: AppFactory,
) -> None:
    hold = asyncio.Event()
    app, agent, _ = app_factory(
        [answer_script("one"), answer_script("two", hold=hold), edit_script("src/main.py", DIFF)]
    )
    async with app.run_test(size=(100, 30)) as pilot:
        written = capture(app)
        await type_line(pilot, "focused")
        await until(pilot, lambda: agent.turns_run == 1 and not app.main.turn_running)
        assert rung(written) == []  # the user is looking: nothing rings
        await type_line(pilot, "then blurred")
        await until(pilot, lambda: app.main.turn_running)
        app.post_message(events.AppBlur())
        await until(pilot, lambda: not app.app_focus)
        hold.set()
        await until(pilot, lambda: not app.main.turn_running)
        await until(pilot, lambda: bool(rung(written)))
        assert rung(written) == [
            "\a\x1b]9;sparkcode: the answer is ready\x07"
            "\x1b]777;notify;sparkcode;the answer is ready\x07"
        ]
        # An approval waiting is worth a call too (sent without a key: a key press
        # tells Textual the terminal has the focus again).
        app.main.prompt.value = "edit it"
        app.main.prompt.action_submit()
        await until(pilot, lambda: len(rung(written)) == 2)
        assert "approval waits: edit src/main.py" in rung(written)[1]
        app.notifier.mode = "off"
        await pilot.press("n")
        await until(pilot, lambda: not app.main.turn_running)
        await pilot.pause(0.1)
        assert len(rung(written)) == 2 and app.notifier.sent == 2


def test_notification_text_cannot_break_out_of_its_sequence() -> None:
    assert notification_sequences("bell", "x") == "\a"
    assert notification_sequences("off", "x") == ""
    text = notification_sequences("desktop", "a;b\x1b]0;evil\x07c")
    assert text == "\x1b]9;sparkcode: a b ]0 evil c\x07\x1b]777;notify;sparkcode;a b ]0 evil c\x07"
