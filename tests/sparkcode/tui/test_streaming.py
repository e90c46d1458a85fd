"""A stream that outgrows the screen: the conversation follows it to its last line.

The answer and the conversation skip the second layout pass Textual asks for when
their virtual size grows (``_size_updated``); this checks the scroll position and
the scroll bar still follow every flush, and stop following once the user
scrolls up.
"""

from __future__ import annotations

import asyncio

from sparkcode.tui.scripted import answer_script
from sparkcode.tui.widgets.chat import AssistantMessage

from .test_pilot import AppFactory, type_line, until

ANSWER = "".join(f"{i}. step {i} of the plan, with a few words to wrap\n\n" for i in range(60))


async def test_the_conversation_follows_a_growing_answer_to_its_end(
    app_factory: AppFactory,
) -> None:
    hold = asyncio.Event()
    app, _, _ = app_factory([answer_script(ANSWER, chunk=40, delay_s=0.01, hold=hold)])
    async with app.run_test(size=(80, 30)) as pilot:
        conversation = app.main.conversation
        await type_line(pilot, "plan it")
        # Generous: under two engines' load in CI the first flushes took over 5 s.
        await until(pilot, lambda: conversation.max_scroll_y > 20, timeout=30)
        for _ in range(3):  # mid-stream, after flushes that grew the answer
            await pilot.pause(0.25)
            assert conversation.scroll_y == conversation.max_scroll_y
            assert conversation.vertical_scrollbar.position == conversation.scroll_y
        await until(
            pilot, lambda: app.main.query_one(AssistantMessage).source == ANSWER, timeout=30
        )
        await pilot.pause(0.3)
        answer = app.main.query_one(AssistantMessage)
        assert answer.size.height == answer.get_content_height(
            conversation.size, app.size, answer.size.width
        )
        assert conversation.scroll_y == conversation.max_scroll_y
        assert (
            conversation.virtual_size.height
            == conversation.max_scroll_y + conversation.scrollable_content_region.height
        )
        conversation.scroll_to(y=0, animate=False)  # the user reads back: no following
        hold.set()
        await until(pilot, lambda: not app.main.turn_running)
        await pilot.pause(0.2)
        assert conversation.scroll_y == 0
