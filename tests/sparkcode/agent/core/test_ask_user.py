"""``ask_user`` through the agent loop: the model asks, the front's asker answers, and the
answer (typed, picked, declined, or nobody to ask) is the next request's tool result."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from sparkcode.agent import Agent, ChatClient, Permissions
from sparkcode.agent.core.asking import Answer, Question, no_user, option_answer
from sparkcode.agent.core.events import ToolCallFinished
from sparkcode.agent.tools import ASK_TOOL, default_tools
from sparkcode.cli._run import EXIT_OK, RunRequest, run_headless
from sparkcode.config import Config
from sparkcode.start import SessionOptions
from tests.support.http_server import serve, url
from tests.support.scripted import Reply, ScriptedServer


def ask(question: str, options: list[str] | None = None) -> Reply:
    args: dict[str, Any] = {"question": question}
    if options is not None:
        args["options"] = options
    return Reply(tool_calls=[(ASK_TOOL, json.dumps(args))])


def tool_results(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


async def turn(
    workspace: Path, replies: list[Reply], answer: Answer | None, mode: str = "ask"
) -> tuple[ScriptedServer, list[Question], list[ToolCallFinished]]:
    server = ScriptedServer(replies)
    asked: list[Question] = []

    async def asker(question: Question) -> Answer:
        asked.append(question)
        assert answer is not None
        return answer

    agent = Agent(
        ChatClient("http://engine.test/v1", "m", transport=server.transport()),
        workspace,
        permissions=Permissions(Config(), mode=mode),  # type: ignore[arg-type]
        asker=asker if answer is not None else None,
    )
    finished = [
        e async for e in agent.run_turn("rename the module") if isinstance(e, ToolCallFinished)
    ]
    return server, asked, finished


async def test_a_typed_answer_reaches_the_next_request(workspace: Path) -> None:
    server, asked, finished = await turn(
        workspace,
        [ask("Which name should the module get?"), Reply(content=["ok"])],
        Answer.answered("  textutil  "),
    )
    assert asked == [Question("Which name should the module get?", (), asked[0].call_id)]
    assert asked[0].call_id == finished[0].call_id != ""
    assert tool_results(server.requests[1])[0].startswith("the user answered: textutil")
    assert finished[0].error is None
    assert any(t["function"]["name"] == ASK_TOOL for t in server.requests[0]["tools"])


async def test_a_picked_option_is_named_with_its_number(workspace: Path) -> None:
    server, asked, _ = await turn(
        workspace,
        [ask("Which way?", ["keep the old name", "rename it", "rename it"]), Reply(content=["ok"])],
        Answer.answered("rename it"),
        mode="plan",
    )
    assert asked[0].options == ("keep the old name", "rename it")  # once each, in order
    assert tool_results(server.requests[1])[0].startswith("the user picked option 2: rename it")


async def test_a_declined_question_tells_the_model_to_go_on(workspace: Path) -> None:
    server, _, finished = await turn(
        workspace, [ask("Which way?"), Reply(content=["ok"])], Answer.declined()
    )
    assert tool_results(server.requests[1])[0].startswith(
        "the user declined to answer; do not ask again: decide yourself"
    )
    assert finished[0].error is None and len(server.requests) == 2  # the turn went on


async def test_nobody_to_ask_is_a_clear_refusal(workspace: Path) -> None:
    server, _, finished = await turn(workspace, [ask("Which way?"), Reply(content=["ok"])], None)
    assert tool_results(server.requests[1])[0].startswith(
        "error: ask_user is not available: nobody can be asked here; decide yourself"
    )
    assert finished[0].error is not None


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ({"question": " "}, "question must be a non-empty string"),
        ({"question": "q", "options": "a, b"}, "options' of ask_user must be an array"),
        ({"question": "q", "options": ["a", ""]}, "options must be a list of non-empty strings"),
        ({"question": "q", "options": [str(i) for i in range(9)]}, "give at most 8"),
        ({"question": "q" * 2001}, "ask in at most 2000"),
    ],
)
async def test_bad_arguments_are_named_and_nobody_is_asked(
    workspace: Path, args: dict[str, Any], problem: str
) -> None:
    server, asked, _ = await turn(
        workspace,
        [Reply(tool_calls=[(ASK_TOOL, json.dumps(args))]), Reply(content=["ok"])],
        Answer.answered("never"),
    )
    assert asked == []
    assert problem in tool_results(server.requests[1])[0]


def test_a_number_picks_that_option() -> None:
    options = ("red", "green")
    assert option_answer(options, " 2 ") == "green"
    assert option_answer(options, "3") == "3" and option_answer(options, "blue") == "blue"


def test_ask_user_is_offered_last_and_left_out_of_a_small_models_list() -> None:
    assert default_tools().names[-1] == ASK_TOOL
    assert ASK_TOOL not in default_tools(only=["read_file", "bash"]).names


async def test_run_without_a_terminal_refuses_and_the_model_reads_why(workspace: Path) -> None:
    with serve([ask("Which name?"), Reply(content=["I chose textutil"])]) as server:
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
        second = server.requests[1]
    assert code == EXIT_OK, err.getvalue()
    assert tool_results(second) == [
        "error: ask_user is not available: no user at a terminal (sparkcode run); decide "
        "yourself and state the assumption"
    ]


async def test_no_user_answers_every_question_unavailable() -> None:
    assert await no_user("why")(Question("q")) == Answer.unavailable("why")
