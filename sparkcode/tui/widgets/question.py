"""The ``ask_user`` card: the model's question in the conversation, answered by typing
(a number picks that option), by an option's button, or declined with Escape.

The card holds the answer's future (:attr:`QuestionCard.answer`), which the TUI's
asker (``sparkcode.tui.asking``) awaits; it is answered once, and a card removed
unanswered (the turn stopped) leaves it to the asker's cancellation.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.widgets import Button, Input, Static

from sparkcode.agent.core.asking import Answer, Question, option_answer


class QuestionCard(Vertical):
    """Asks the user one :class:`Question`; :attr:`answer` gets their answer once."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "decline", "Decline to answer")]

    def __init__(self, question: Question) -> None:
        super().__init__(classes="question")
        self.question = question
        self.answer: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        """Set once: typed, picked or declined."""

    def compose(self) -> ComposeResult:
        q = self.question
        yield Static(Text("The model asks:", style="bold"), classes="question-title")
        yield Static(Text(q.text), classes="question-text")
        with Vertical(classes="question-options"):
            for n, option in enumerate(q.options, 1):
                yield Button(f"{n}. {option}", id=f"option-{n}", compact=True)
        hint = "a number or your own answer" if q.options else "your answer"
        yield Input(
            placeholder=f"type {hint}, Enter sends; Escape declines", classes="question-input"
        )

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def _give(self, answer: Answer) -> None:
        if not self.answer.done():
            self.answer.set_result(answer)

    @on(Input.Submitted)
    def _typed(self, event: Input.Submitted) -> None:
        event.stop()
        text = option_answer(self.question.options, event.value)
        if not text:
            self.notify(
                "type an answer, pick an option, or press Escape to decline", severity="warning"
            )
            return
        self._give(Answer.answered(text))

    @on(Button.Pressed)
    def _picked(self, event: Button.Pressed) -> None:
        event.stop()
        n = int((event.button.id or "option-0").removeprefix("option-"))
        if 1 <= n <= len(self.question.options):
            self._give(Answer.answered(self.question.options[n - 1]))

    def action_decline(self) -> None:
        self._give(Answer.declined())


__all__ = ["QuestionCard"]
