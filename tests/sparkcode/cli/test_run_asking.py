"""``sparkcode run``'s ``ask_user``: with a terminal the question is printed on stderr
and the answer read from stdin (a number picks an option, an empty line declines);
the run's model gets it. Without one: tests/sparkcode/agent/core/test_ask_user.py."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from sparkcode.agent.core.asking import Answer, Question
from sparkcode.cli._asking import NO_TERMINAL, run_asker
from sparkcode.cli._run import EXIT_OK, RunRequest, run_headless
from sparkcode.start import SessionOptions
from tests.support.http_server import serve, url
from tests.support.scripted import Reply


class Terminal(io.StringIO):
    """Standard input that is a terminal, with the user's lines typed ahead."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("typed", "answer"),
    [
        ("2\n", Answer.answered("rename it")),
        ("my own way\n", Answer.answered("my own way")),
        ("\n", Answer.declined()),
        ("", Answer.declined()),  # end of input
    ],
)
async def test_the_terminal_answers(
    monkeypatch: pytest.MonkeyPatch, typed: str, answer: Answer
) -> None:
    monkeypatch.setattr(sys, "stdin", Terminal(typed))
    err = io.StringIO()
    got = await run_asker(err)(Question("Which way?", ("keep it", "rename it")))
    assert got == answer
    assert "--- the model asks: Which way?\n  1. keep it\n  2. rename it\n" in err.getvalue()


async def test_no_terminal_asks_nobody(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("2\n"))
    assert await run_asker(io.StringIO())(Question("q")) == Answer.unavailable(NO_TERMINAL)
    assert sys.stdin.read() == "2\n"  # nothing was read


async def test_a_run_at_a_terminal_sends_the_typed_answer(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", Terminal("textutil\n"))
    call = ("ask_user", json.dumps({"question": "Which name?"}))
    with serve([Reply(tool_calls=[call]), Reply(content=["renamed"])]) as server:
        out, err = io.StringIO(), io.StringIO()
        code = await run_headless(
            RunRequest(
                prompt="rename it",
                workspace=workspace,
                endpoint=url(server),
                session=SessionOptions(record=False),
            ),
            out=out,
            err=err,
        )
        sent = server.requests[1]["messages"][-1]["content"]
    assert code == EXIT_OK, err.getvalue()
    assert sent.startswith("the user answered: textutil")
    assert "--- the model asks: Which name?" in err.getvalue()
