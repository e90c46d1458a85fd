"""Small-model mode against a scripted server: the schema is sent, steps are run, and
the user sees answers as text and tool steps as calls, never the JSON."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from engine.profiles import AgentKnobs
from sparkcode.agent import (
    ContentDelta,
    Event,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
    UsageUpdate,
)
from sparkcode.agent.scaffold.structured import (
    WHOLE_FILE_NOTE,
    read_step,
    results_as_user,
    step_schema,
    tools_prompt,
)
from sparkcode.agent.tools import default_tools
from sparkcode.cli._run import EXIT_OK, RunRequest, run_headless
from sparkcode.start import SessionOptions
from tests.sparkcode.agent.core.test_loop import make_agent, of, run
from tests.support.http_server import serve, url
from tests.support.scripted import Reply, ScriptedServer


def test_the_schema_offers_each_tool_with_its_arguments_or_an_answer() -> None:
    tools = default_tools()
    options = step_schema(tools)["anyOf"]
    assert [o["properties"].get("tool", {}).get("const") for o in options] == [*tools.names, None]
    write = options[tools.names.index("write_file")]
    assert write["properties"]["arguments"]["required"] == ["path", "content"]
    assert write["properties"]["arguments"]["additionalProperties"] is False
    assert options[-1]["required"] == ["answer"]
    assert read_step('{"answer": "hi"}') is not None
    assert read_step('{"tool": "x"') is None  # cut off


async def test_steps_are_run_and_the_answer_ends_the_turn(workspace: Path) -> None:
    step = json.dumps({"tool": "write_file", "arguments": {"path": "n.md", "content": "hi"}})
    server = ScriptedServer(
        [Reply(content=[step[:20], step[20:]]), Reply(content=['{"answer": "wrote n.md"}'])]
    )
    agent = make_agent(server, workspace, structured_tools=True)
    events = await run(agent, "write n.md")
    first = server.requests[0]
    assert "tools" not in first and "tool_choice" not in first
    assert first["structured_outputs"]["disable_any_whitespace"] is True
    assert len(first["structured_outputs"]["json"]["anyOf"]) == len(default_tools().names) + 1
    assert '{"tool":"NAME","arguments":{...}}' in first["messages"][0]["content"]
    assert "- write_file(path: string, content: string)" in first["messages"][0]["content"]
    assert [(s.name, s.arguments) for s in of(events, ToolCallStarted)] == [
        ("write_file", {"path": "n.md", "content": "hi"})
    ]
    assert [f.error for f in of(events, ToolCallFinished)] == [None]
    assert (workspace / "n.md").read_text() == "hi"
    assert of(events, TurnFinished)[-1].content == "wrote n.md"
    # The model sees its own step as it wrote it (its template may render no calls).
    said = [m for m in server.requests[1]["messages"] if m["role"] == "assistant"]
    assert said[0]["content"] == step
    assert agent.history[-1]["content"] == '{"answer": "wrote n.md"}'


def shown(events: list[Event]) -> list[str]:
    return [e.text for e in events if isinstance(e, ContentDelta)]


async def test_the_user_sees_the_answer_decoded_and_no_json_of_a_tool_step(workspace: Path) -> None:
    (workspace / "a.txt").write_text("pelican\n")
    call = '{"tool": "read_file", "arguments": {"path": "a.txt"}}'
    answer = '{"answer": "The word is \\"pelican\\".\\nDone \\u2713"}'
    # Split inside the escapes: \" and \n and \u2713 each arrive in two deltas.
    server = ScriptedServer(
        [
            Reply(content=[call[:9], call[9:30], call[30:]]),
            Reply(content=[answer[:25], answer[25:37], answer[37:46], answer[46:]]),
        ]
    )
    agent = make_agent(server, workspace, structured_tools=True)
    events = await run(agent, "what word is in a.txt?")
    expected = json.loads(answer)["answer"]
    assert expected == 'The word is "pelican".\nDone \u2713'
    assert "".join(shown(events)) == expected
    assert all("{" not in text for text in shown(events))
    kinds = [
        type(e).__name__
        for e in events
        if isinstance(e, ContentDelta | ToolCallStarted | ToolCallFinished)
    ]
    # The tool step streams no text: its call event is all there is of it.
    assert kinds[:2] == ["ToolCallStarted", "ToolCallFinished"]
    assert set(kinds[2:]) == {"ContentDelta"}
    assert "pelican" in of(events, ToolCallFinished)[0].result
    assert of(events, TurnFinished)[-1].content == expected
    # The history keeps the steps as written (what the model sees next time).
    assert [m["content"] for m in agent.history if m["role"] == "assistant"] == [call, answer]


async def test_an_answer_cut_by_the_output_limit_ends_with_the_text_it_began(
    workspace: Path,
) -> None:
    server = ScriptedServer(
        [Reply(content=['{"answer": "first line\\nsecond', " li"], finish="length")]
    )
    agent = make_agent(server, workspace, structured_tools=True)
    events = await run(agent, "hi")
    assert "".join(shown(events)) == "first line\nsecond li"
    finished = of(events, TurnFinished)[-1]
    assert (finished.reason, finished.content) == ("length", "first line\nsecond li")
    # The text comes before the request's last usage report, as in normal mode.
    last = max(i for i, e in enumerate(events) if isinstance(e, ContentDelta))
    assert any(isinstance(e, UsageUpdate) and e.final for e in events[last:])


async def test_sparkcode_run_prints_the_answer_not_the_step(workspace: Path) -> None:
    step = '{"answer": "line one\\nline two"}'
    with serve([Reply(content=[step[:14], step[14:]])]) as server:
        out, err = io.StringIO(), io.StringIO()
        code = await run_headless(
            RunRequest(
                prompt="hi",
                workspace=workspace,
                endpoint=url(server),
                session=SessionOptions(record=False, knobs=AgentKnobs(structured_tools=True)),
            ),
            out=out,
            err=err,
        )
        assert code == EXIT_OK, err.getvalue()
        assert out.getvalue() == "line one\nline two\n"
        out = io.StringIO()
        server.replies.append(Reply(content=[step[:14], step[14:]]))
        code = await run_headless(
            RunRequest(
                prompt="hi",
                workspace=workspace,
                as_json=True,
                endpoint=url(server),
                session=SessionOptions(record=False, knobs=AgentKnobs(structured_tools=True)),
            ),
            out=out,
            err=err,
        )
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    assert "".join(e["text"] for e in events if e["type"] == "ContentDelta") == "line one\nline two"


async def test_a_qwen_profile_steps_in_the_hermes_shape_and_calls_a_tool_first(
    workspace: Path,
) -> None:
    """``step_name_key = "name"``: calls are ``{"name": ..., "arguments": ...}`` in the
    prompt, the schema and the reader; ``first_step_tool``: the turn's first request
    admits no answer, the later ones do."""
    (workspace / "README.md").write_text("The secret word is pelican.\n")
    step = json.dumps({"name": "read_file", "arguments": {"path": "README.md"}})
    server = ScriptedServer([Reply(content=[step]), Reply(content=['{"answer": "pelican"}'])])
    agent = make_agent(
        server, workspace, structured_tools=True, step_name_key="name", first_step_tool=True
    )
    events = await run(agent, "what is the secret word?")
    first, second = server.requests
    assert '{"name":"NAME","arguments":{...}}' in first["messages"][0]["content"]
    first_options = first["structured_outputs"]["json"]["anyOf"]
    assert len(first_options) == len(default_tools().names)
    assert all(o["required"] == ["name", "arguments"] for o in first_options)
    assert second["structured_outputs"]["json"]["anyOf"][-1]["required"] == ["answer"]
    assert [(s.name, s.arguments) for s in of(events, ToolCallStarted)] == [
        ("read_file", {"path": "README.md"})
    ]
    assert of(events, TurnFinished)[-1].content == "pelican"


async def test_task_reminder_repeats_the_task_after_each_tool_result(workspace: Path) -> None:
    (workspace / "a.py").write_text("x = 1\n")
    step = json.dumps({"name": "read_file", "arguments": {"path": "a.py"}})
    server = ScriptedServer([Reply(content=[step]), Reply(content=['{"answer": "x is 1"}'])])
    agent = make_agent(
        server, workspace, structured_tools=True, step_name_key="name", task_reminder=True
    )
    await run(agent, "what is x in a.py?")
    tool = [m for m in server.requests[1]["messages"] if m["role"] == "tool"][0]
    assert "x = 1" in tool["content"]
    assert tool["content"].endswith(
        "(The task: what is x in a.py?\nReply with the next step: "
        'another tool call, or {"answer":"..."} if the task is done.)'
    )


async def test_workspace_files_lists_the_files_in_the_system_prompt(workspace: Path) -> None:
    (workspace / "calc.py").write_text("x = 1\n")
    (workspace / "pkg").mkdir()
    (workspace / "pkg" / "test_calc.py").write_text("")
    (workspace / "__pycache__").mkdir()
    (workspace / "__pycache__" / "calc.pyc").write_bytes(b"")
    server = ScriptedServer([Reply(content=['{"answer": "ok"}'])] * 2)
    agent = make_agent(
        server, workspace, structured_tools=True, step_name_key="name", workspace_files=True
    )
    await run(agent, "which files are there?")
    system = server.requests[0]["messages"][0]["content"]
    assert system.endswith("\n\nThe workspace's files:\ncalc.py\npkg/test_calc.py")
    plain = make_agent(server, workspace, structured_tools=True, step_name_key="name")
    await run(plain, "which files are there?")
    assert "calc.py" not in server.requests[1]["messages"][0]["content"]


async def test_results_as_user_sends_each_result_as_a_user_message_after_the_step(
    workspace: Path,
) -> None:
    """``results_as_user``: the request shows the step as written (no tool_calls, which
    Qwen's template would render a second time in <tool_call> tags) and its result as a
    user message; the history keeps the API's form, every call with its tool result."""
    (workspace / "a.py").write_text("x = 1\n")
    step = json.dumps({"name": "read_file", "arguments": {"path": "a.py"}})
    server = ScriptedServer([Reply(content=[step]), Reply(content=['{"answer": "x is 1"}'])])
    agent = make_agent(
        server, workspace, structured_tools=True, step_name_key="name", results_as_user=True
    )
    await run(agent, "what is x in a.py?")
    sent = server.requests[1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    assert sent[2] == {"role": "assistant", "content": step}
    assert sent[3]["content"].startswith("Result:\n") and "x = 1" in sent[3]["content"]
    assert [m["role"] for m in agent.history] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert agent.history[2]["tool_calls"][0]["function"]["name"] == "read_file"
    # Without it (cpu-demo's setting) the request is the API's form, as before.
    plain = ScriptedServer([Reply(content=[step]), Reply(content=['{"answer": "x is 1"}'])])
    await run(
        make_agent(plain, workspace, structured_tools=True, step_name_key="name"),
        "what is x in a.py?",
    )
    assert [m["role"] for m in plain.requests[1]["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
    ]


def test_results_as_user_shows_a_server_parsed_call_as_a_step() -> None:
    history: list[dict[str, Any]] = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command": "ls"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
    ]
    assert results_as_user(history, "name") == [
        {"role": "assistant", "content": '{"name":"bash","arguments":{"command":"ls"}}'},
        {"role": "user", "content": "Result:\na.py"},
    ]


def test_a_tool_list_without_edit_file_asks_for_whole_files() -> None:
    whole = tools_prompt(default_tools(only=["read_file", "write_file", "bash"]), "name")
    assert whole.endswith("\n" + WHOLE_FILE_NOTE)
    edits = tools_prompt(default_tools(only=["read_file", "write_file", "edit_file"]), "name")
    assert WHOLE_FILE_NOTE not in edits
