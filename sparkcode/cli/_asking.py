"""``sparkcode run``'s asker for ``ask_user`` (:mod:`sparkcode.agent.core.asking`): the
question on standard error and the answer read from the terminal; without a
terminal nobody is asked and the model is told to decide itself."""

from __future__ import annotations

import asyncio
import sys
from typing import TextIO

from sparkcode.agent.core.asking import Answer, Asker, Question, no_user, option_answer

NO_TERMINAL = "no user at a terminal (sparkcode run)"


def run_asker(err: TextIO, *, tty: bool | None = None) -> Asker:
    """Asks on the terminal when standard input is one (``tty``: None looks)."""
    if not (sys.stdin.isatty() if tty is None else tty):
        return no_user(NO_TERMINAL)

    async def ask(question: Question) -> Answer:
        print(f"\n--- the model asks: {question.text}", file=err)
        for n, option in enumerate(question.options, 1):
            print(f"  {n}. {option}", file=err)
        hint = "a number or your own answer" if question.options else "your answer"
        print(f"({hint}; an empty line declines)", file=err, flush=True)
        try:
            line = await asyncio.to_thread(sys.stdin.readline)
        except (OSError, ValueError):
            line = ""
        text = option_answer(question.options, line)
        return Answer.answered(text) if text else Answer.declined()

    return ask


__all__ = ["NO_TERMINAL", "run_asker"]
