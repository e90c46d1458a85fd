"""The ``ask_user`` tool's port: how the agent asks the person a question.

The tool (:mod:`.tools._ask`) hands a :class:`Question` to the session's
:data:`Asker`, which a front supplies (``Agent.asker``): the TUI shows a card
(``sparkcode.tui.asking``), ``sparkcode acp`` asks the editor
(``sparkcode.acp._asking``), ``sparkcode run`` asks on the terminal or, without
one, answers :meth:`Answer.unavailable`. The agent never sees how it is asked;
without an asker (a ``task`` sub-conversation, the bench) nobody can be asked.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

AnswerKind = Literal["answered", "declined", "unavailable"]
DECIDE = "decide yourself and state the assumption"
"""What the model is told to do when nobody can be asked."""


@dataclass(frozen=True)
class Question:
    """What the model asks: its words, the answers it offers (may be none), its call."""

    text: str
    options: tuple[str, ...] = ()
    call_id: str = ""


@dataclass(frozen=True)
class Answer:
    """The person's answer, their refusal to answer, or why nobody can be asked."""

    kind: AnswerKind
    text: str = ""
    """``answered``: the words (an option's text when one was picked);
    ``unavailable``: why nobody can be asked, completing "ask_user is not available: "."""
    then: str = DECIDE
    """``unavailable``: what the model should do instead."""

    @classmethod
    def answered(cls, text: str) -> Answer:
        return cls("answered", text)

    @classmethod
    def declined(cls) -> Answer:
        return cls("declined")

    @classmethod
    def unavailable(cls, why: str, then: str = DECIDE) -> Answer:
        return cls("unavailable", why, then)


Asker = Callable[[Question], Awaitable[Answer]]
"""Asks the person and waits for them (a front's implementation)."""


def no_user(why: str) -> Asker:
    """An asker for a front without a person to ask: every question is
    :meth:`Answer.unavailable` for ``why`` (``no user at a terminal (sparkcode run)``)."""

    async def ask(question: Question) -> Answer:
        return Answer.unavailable(why)

    return ask


def option_answer(options: tuple[str, ...], typed: str) -> str:
    """A typed answer, where a bare number picks that option (``2`` -> its text)."""
    text = typed.strip()
    if text.isdigit() and 1 <= int(text) <= len(options):
        return options[int(text) - 1]
    return text


__all__ = ["DECIDE", "Answer", "AnswerKind", "Asker", "Question", "no_user", "option_answer"]
