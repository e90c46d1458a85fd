"""The TUI's asker for ``ask_user`` (:mod:`sparkcode.agent.core.asking`).

The agent asks inside the turn's worker; the question becomes a
:class:`~.widgets.question.QuestionCard` at the end of the conversation, which
takes the focus and holds the answer's future. Once answered (or the turn stopped)
the card goes and the prompt has the focus again; the tool call's card shows the
answer as its result.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from textual.app import App
from textual.css.query import NoMatches

from sparkcode.agent.core.asking import Answer, Asker, Question

from .messages import AttentionNeeded
from .widgets.conversation import Conversation
from .widgets.question import QuestionCard


def user_asker(get_app: Callable[[], App[Any] | None]) -> Asker:
    """An asker that shows each question as a card on ``get_app()``'s conversation."""

    async def ask(question: Question) -> Answer:
        app = get_app()
        conversation = _conversation(app) if app is not None else None
        if app is None or conversation is None:
            return Answer.unavailable("the conversation is not on screen")
        card = QuestionCard(question)
        await conversation.mount(card)
        conversation.scroll_end(animate=False)
        app.post_message(AttentionNeeded(f"the model asks: {question.text}"))
        try:
            return await card.answer
        finally:
            if card.is_attached:
                await card.remove()
            with contextlib.suppress(NoMatches):
                conversation.screen.query_one("#prompt").focus()

    return ask


def _conversation(app: App[Any]) -> Conversation | None:
    """The conversation of the newest screen that has one (a dialog may be on top)."""
    for screen in reversed(app.screen_stack):
        with contextlib.suppress(NoMatches):
            found: Conversation = screen.query_one("#conversation", Conversation)
            return found
    return None


__all__ = ["user_asker"]
