"""``ask_user`` over real stdio with the SDK's client: a question with options is a
``session/request_permission`` whose options are the answers (picked, declined), one
without options is a form elicitation where the editor offers them, and otherwise the
model is told to ask with options; each answer is the next request's tool result."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from acp import text_block
from acp.schema import (
    AcceptElicitationResponse,
    ClientCapabilities,
    ElicitationCapabilities,
    ElicitationFormCapabilities,
    ElicitationFormSessionMode,
)

from tests.sparkcode.acp.client import EditorClient, spawn
from tests.support.http_server import serve, url
from tests.support.scripted import Reply

pytestmark = pytest.mark.slow


FORMS = ClientCapabilities(elicitation=ElicitationCapabilities(form=ElicitationFormCapabilities()))
"""An editor's capabilities when it takes form elicitations."""


def ask(question: str, options: list[str] | None = None) -> Reply:
    args: dict[str, Any] = {"question": question}
    if options:
        args["options"] = options
    return Reply(tool_calls=[("ask_user", json.dumps(args))])


def results(requests: list[dict[str, Any]]) -> list[str]:
    """The answers the model read: the tool result of each request after a question
    (every second one: a question, then an answer, per prompt)."""
    return [str(r["messages"][-1]["content"]) for r in requests[1::2]]


@dataclass
class FormEditor(EditorClient):
    """An editor that also takes form elicitations and types ``typed``."""

    typed: str = "textutil"
    elicited: list[tuple[str, ElicitationFormSessionMode]] = field(default_factory=list)

    async def create_elicitation(
        self, message: str, mode: Any, **kwargs: Any
    ) -> AcceptElicitationResponse:
        self.elicited.append((message, mode))
        return AcceptElicitationResponse(action="accept", content={"answer": self.typed})


async def test_options_are_permission_options_picked_or_declined(
    workspace: Path, sparkcode_home: Path
) -> None:
    replies = [
        ask("Which way?", ["keep the name", "rename it"]),
        Reply(content=["one"]),
        ask("And the tests?", ["skip", "run"]),
        Reply(content=["two"]),
        ask("Which name?"),
        Reply(content=["three"]),
    ]
    client = EditorClient(answer="answer-2")
    with serve(replies) as server:
        async with spawn(client, "--endpoint", url(server), home=sparkcode_home, cwd=workspace) as (
            conn,
            _,
        ):
            await conn.initialize(protocol_version=1)
            sid = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            await conn.prompt(session_id=sid, prompt=[text_block("tidy up")])
            client.answer = "decline"
            await conn.prompt(session_id=sid, prompt=[text_block("and the tests")])
            await conn.prompt(session_id=sid, prompt=[text_block("name it")])
        answers = results(server.requests)
    assert answers[0].startswith("the user picked option 2: rename it")
    assert answers[1].startswith("the user declined to answer; do not ask again")
    assert answers[2] == (
        "error: ask_user is not available: this editor takes no typed "
        "answer over ACP (no form elicitation); call ask_user again with "
        "options to pick from, or decide yourself and state the assumption"
    )
    (call, options), _ = client.permissions  # the third question asked nobody
    assert [(o.option_id, o.name, o.kind) for o in options] == [
        ("answer-1", "keep the name", "allow_once"),
        ("answer-2", "rename it", "allow_once"),
        ("decline", "Decline to answer", "reject_once"),
    ]
    started = [u for u in client.of("tool_call") if u.title == "ask_user: Which way?"]
    assert len(started) == 1 and call.tool_call_id == started[0].tool_call_id
    assert call.title == "The model asks: Which way?"


async def test_a_typed_answer_by_form_elicitation(workspace: Path, sparkcode_home: Path) -> None:
    client = FormEditor(answer=None)
    with serve([ask("Which name should the module get?"), Reply(content=["renamed"])]) as server:
        async with spawn(
            client, "--endpoint", url(server), home=sparkcode_home, cwd=workspace, unstable=True
        ) as (conn, _):
            await conn.initialize(protocol_version=1, client_capabilities=FORMS)
            sid = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            await conn.prompt(session_id=sid, prompt=[text_block("rename the module")])
        answers = results(server.requests)
    assert answers[0].startswith("the user answered: textutil")
    ((message, mode),) = client.elicited
    assert message == "Which name should the module get?" and mode.session_id == sid
    assert mode.requested_schema.required == ["answer"]
    started = [u for u in client.of("tool_call") if u.title.startswith("ask_user")]
    assert mode.tool_call_id == started[0].tool_call_id
    assert client.permissions == []


async def test_an_editor_with_forms_can_answer_a_question_with_options_in_its_own_words(
    workspace: Path, sparkcode_home: Path
) -> None:
    client = FormEditor(answer="own-words", typed="both, pytest first")
    replies = [ask("Which runner?", ["pytest", "unittest"]), Reply(content=["ok"])]
    with serve(replies) as server:
        async with spawn(
            client, "--endpoint", url(server), home=sparkcode_home, cwd=workspace, unstable=True
        ) as (conn, _):
            await conn.initialize(protocol_version=1, client_capabilities=FORMS)
            sid = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            await conn.prompt(session_id=sid, prompt=[text_block("set up the tests")])
        answers = results(server.requests)
    assert answers[0].startswith("the user answered: both, pytest first")
    ((_, options),) = client.permissions
    assert [(o.option_id, o.name) for o in options] == [
        ("answer-1", "pytest"),
        ("answer-2", "unittest"),
        ("own-words", "Answer in my own words"),
        ("decline", "Decline to answer"),
    ]
    ((message, mode),) = client.elicited  # the typed answer, asked after the pick
    assert message == "Which runner?" and mode.session_id == sid
