"""``questions_read_only``, ``hidden_arguments`` and the reminder after a change: a
question turn's grammar has no edit tool and its reminder asks for the answer; hidden
arguments are not in the tools' specs; a change that was made is said to be made."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.errors import UserError
from sparkcode.agent import Notice, ToolCallFinished
from sparkcode.agent.scaffold.message_words import files_to_change, is_question
from sparkcode.agent.tools import default_tools
from sparkcode.bench._agent_tasks import load_tasks
from tests.sparkcode.agent.core.test_loop import make_agent, of, run
from tests.support.scripted import Reply, ScriptedServer


def test_the_suites_questions_and_changes_are_told_apart() -> None:
    for task in load_tasks().values():
        assert is_question(task.prompt) == (task.kind in ("answer", "run-tests")), task.id


@pytest.mark.parametrize(
    ("text", "question"),
    [
        ("What does this project do?", True),
        ("explain calc.py", True),
        ("How do I use the CLI? Do not change anything.", True),
        ("Run the tests and tell me which one fails; do not edit the tests.", True),
        ("Why does test_x fail? Fix it.", False),
        ("Can you add a test for parse()?", False),
        ("Which function is slow? Make it faster.", False),
        ("Run the tests.", False),
        ("Set x to 3 in a.py", False),
    ],
)
def test_is_question(text: str, question: bool) -> None:
    assert is_question(text) is question


def _names(schema: dict[str, object]) -> list[object]:
    options = schema["anyOf"]
    assert isinstance(options, list)
    return [o["properties"].get("name", {}).get("const", "ANSWER") for o in options]


async def test_a_question_turn_offers_no_edit_tool_and_asks_for_the_answer(workspace: Path) -> None:
    (workspace / "a.py").write_text("x = 1\n")
    read = json.dumps({"name": "read_file", "arguments": {"path": "a.py"}})
    server = ScriptedServer(
        [
            Reply(content=[read]),
            Reply(content=['{"answer":"1"}']),
            Reply(content=[read]),
            Reply(content=['{"answer":"ok"}']),
        ]
    )
    agent = make_agent(
        server,
        workspace,
        structured_tools=True,
        step_name_key="name",
        first_step_tool=True,
        task_reminder=True,
        questions_read_only=True,
    )
    events = await run(agent, "What is x in a.py?")
    first, second = (r["structured_outputs"]["json"] for r in server.requests[:2])
    assert _names(first) == [
        "read_file",
        "list_files",
        "grep",
        "bash",
        "job_output",
        "job_stop",
        "git_status",
        "git_diff",
        "git_log",
        "git_commit",
        "todo",
        "task",
        "ask_user",
    ]
    assert _names(second)[-1] == "ANSWER" and "edit_file" not in _names(second)
    assert any(n.code == "question_read_only" for n in of(events, Notice))
    result = server.requests[1]["messages"][-1]["content"]
    assert result.endswith(
        "(The question: What is x in a.py?\nNo file is to be changed. "
        'Reply {"answer":"..."} as soon as you know the answer; '
        "otherwise make the next tool call.)"
    )
    # A change request in the same session gets every tool back.
    events = await run(agent, "Fix a.py so that x is 2.")
    assert "edit_file" in _names(server.requests[2]["structured_outputs"]["json"])
    assert not any(n.code == "question_read_only" for n in of(events, Notice))


async def test_a_change_that_was_made_is_said_to_be_made(workspace: Path) -> None:
    write = json.dumps({"name": "write_file", "arguments": {"path": "h.txt", "content": "hello"}})
    bad = json.dumps(
        {"name": "edit_file", "arguments": {"path": "h.txt", "old_string": "x", "new_string": "y"}}
    )
    server = ScriptedServer(
        [Reply(content=[write]), Reply(content=[bad]), Reply(content=['{"answer":"done"}'])]
    )
    agent = make_agent(
        server, workspace, structured_tools=True, step_name_key="name", task_reminder=True
    )
    events = await run(agent, "Create h.txt with hello.")
    made = server.requests[1]["messages"][-1]["content"]
    assert "That change is made. If the task asks for nothing more (no other file" in made
    failed = server.requests[2]["messages"][-1]["content"]
    assert failed.startswith("error:") and "That change is made" not in failed
    assert "Reply with the next step" in failed
    assert of(events, ToolCallFinished)[1].error is not None


@pytest.mark.parametrize(
    ("text", "names"),
    [
        (
            "Add clamp(x, low, high) to limits.py (low..high), and add a test to test_limits.py.",
            ("limits.py", "test_limits.py"),
        ),
        ("Create constants.py that defines PI = 3.14159.", ("constants.py",)),
        (
            "Rename the module helpers.py to textutil.py; e.g. fix main.py's import of helpers.py.",
            ("helpers.py", "textutil.py", "main.py"),
        ),
        (
            "Call os.path.join( in src/app.ts and update `config.json`.",
            ("src/app.ts", "config.json"),
        ),
        ("test_calc.py fails. Fix the bug in calc.py, then run test_calc.py.", ("calc.py",)),
        ("Fix calc.py; do not change test_calc.py.", ("calc.py",)),
        ("Fix the bug.", ()),
    ],
)
def test_files_to_change(text: str, names: tuple[str, ...]) -> None:
    assert files_to_change(text) == names


def _write(path: str, content: str = "x = 1\n") -> str:
    return json.dumps({"name": "write_file", "arguments": {"path": path, "content": content}})


async def test_a_change_names_the_files_the_task_asks_to_change_and_no_edit_has_changed(
    workspace: Path,
) -> None:
    """add-function: told "If the task asks for nothing more (no other file ...)" after
    writing square, the 1.5B answered without the test the task asked for."""
    task = "Add a function f to lim.py, and add a test for it to test_lim.py and t2.py."
    server = ScriptedServer(
        [
            Reply(content=[_write("lim.py")]),
            Reply(content=[_write("src/test_lim.py")]),
            Reply(content=[_write("t2.py")]),
            Reply(content=['{"answer":"done"}']),
        ]
    )
    agent = make_agent(
        server, workspace, structured_tools=True, step_name_key="name", task_reminder=True
    )
    await run(agent, task)
    first, second, third = (server.requests[i]["messages"][-1]["content"] for i in (1, 2, 3))
    assert first.endswith(
        f"(The task: {task}\nThat change is made. Next, the task asks for "
        "a change in test_lim.py and t2.py: make that change with a tool "
        "call.)"
    )
    assert "a change in t2.py: make" in second  # by its name
    assert "That change is made. If the task asks for nothing more (no other file" in third


async def test_a_test_run_does_not_count_as_a_change_of_the_test_file(workspace: Path) -> None:
    (workspace / "test_lim.py").write_text("import unittest\n")
    tests = json.dumps(
        {
            "name": "bash",
            "arguments": {"command": "python -m unittest test_lim.py 2>&1 | tail -3 2>/dev/null"},
        }
    )
    server = ScriptedServer(
        [
            Reply(content=[_write("lim.py")]),
            Reply(content=[tests]),
            Reply(content=[_write("lim.py", "y = 2\n")]),
            Reply(content=['{"answer":"done"}']),
        ]
    )
    agent = make_agent(
        server, workspace, structured_tools=True, step_name_key="name", task_reminder=True
    )
    await run(agent, "Add f to lim.py, and add a test for it to test_lim.py.")
    assert "asks for a change in test_lim.py" in server.requests[3]["messages"][-1]["content"]


async def test_kept_and_moved_files_are_not_named(workspace: Path) -> None:
    (workspace / "helpers.py").write_text("x = 1\n")
    move = json.dumps({"name": "bash", "arguments": {"command": "mv helpers.py textutil.py"}})
    server = ScriptedServer(
        [
            Reply(content=[_write("stats.py")]),
            Reply(content=['{"answer":"a"}']),
            Reply(content=[move]),
            Reply(content=[_write("main.py")]),
            Reply(content=['{"answer":"b"}']),
        ]
    )
    agent = make_agent(
        server, workspace, structured_tools=True, step_name_key="name", task_reminder=True
    )
    await run(agent, "test_stats.py fails. Fix stats.py; do not change the tests.")
    assert "If the task asks for nothing more" in server.requests[1]["messages"][-1]["content"]
    await run(agent, "Rename helpers.py to textutil.py and fix the import in main.py.")
    assert "If the task asks for nothing more" in server.requests[4]["messages"][-1]["content"]


async def test_a_nudged_edit_is_not_said_to_be_made(workspace: Path) -> None:
    """The loop nudge's "not run:" is no change: its reminder is the plain one."""
    (workspace / "m.py").write_text("x = 1\n")
    miss = json.dumps(
        {"name": "edit_file", "arguments": {"path": "m.py", "old_string": "y", "new_string": "z"}}
    )
    server = ScriptedServer([Reply(content=[miss])] * 3 + [Reply(content=['{"answer":"a"}'])])
    agent = make_agent(
        server,
        workspace,
        structured_tools=True,
        step_name_key="name",
        task_reminder=True,
        loop_nudge=True,
    )
    await run(agent, "Change y to z in m.py.")
    nudged = server.requests[3]["messages"][-1]["content"]
    assert "not run: you made this call several times" in nudged
    assert "That change is made" not in nudged and "Reply with the next step" in nudged


def test_hidden_arguments_leave_the_specs_and_a_wrong_one_is_named() -> None:
    tools = default_tools(only=["read_file", "edit_file", "bash"])
    hidden = tools.hiding(
        ["bash.sandbox", "bash.timeout_s", "edit_file.replace_all", "multi_edit.edits"]
    )  # a tool not offered is passed over
    props = {
        s["function"]["name"]: set(s["function"]["parameters"]["properties"])
        for s in hidden.specs()
    }
    assert props == {
        "read_file": {"path", "start_line", "end_line"},
        "edit_file": {"path", "old_string", "new_string"},
        "bash": {"command"},
    }
    assert "sandbox" in tools.specs()[2]["function"]["parameters"]["properties"]  # unchanged
    with pytest.raises(
        UserError,
        match=r"'bash.command' is not an optional argument of "
        r"bash \(its optional arguments: timeout_s, sandbox\)",
    ):
        tools.hiding(["bash.command"])
    with pytest.raises(UserError, match="'edit_file.force' is not an optional argument"):
        tools.hiding(["edit_file.force"])


async def test_the_agent_hides_them_from_the_prompt_and_the_grammar(workspace: Path) -> None:
    server = ScriptedServer([Reply(content=['{"answer":"ok"}'])])
    agent = make_agent(
        server,
        workspace,
        structured_tools=True,
        step_name_key="name",
        hidden_arguments=("bash.sandbox", "bash.background"),
    )
    await run(agent, "hi")
    system = server.requests[0]["messages"][0]["content"]
    assert "- bash(command: string, timeout_s?: number): " in system
    bash = next(
        o
        for o in server.requests[0]["structured_outputs"]["json"]["anyOf"]
        if o["properties"].get("name", {}).get("const") == "bash"
    )
    assert set(bash["properties"]["arguments"]["properties"]) == {"command", "timeout_s"}


async def test_a_task_that_asks_for_a_run_keeps_the_plain_reminder(workspace: Path) -> None:
    write = json.dumps({"name": "write_file", "arguments": {"path": "h.txt", "content": "hello"}})
    server = ScriptedServer([Reply(content=[write]), Reply(content=['{"answer":"done"}'])])
    agent = make_agent(
        server, workspace, structured_tools=True, step_name_key="name", task_reminder=True
    )
    await run(agent, "Create h.txt with hello, then run the tests.")
    made = server.requests[1]["messages"][-1]["content"]
    assert "That change is made" not in made and "Reply with the next step" in made


async def test_a_run_that_was_asked_for_is_reminded_until_bash_has_run(workspace: Path) -> None:
    """run-tests: the 1.5B read one file and answered without the run it was told to make.
    Until a bash call has run, the reminder says the run is still to be made; a refused
    or failed bash call does not count, a command that ran (any exit code) does."""
    (workspace / "a.py").write_text("x = 1\n")
    read = json.dumps({"name": "read_file", "arguments": {"path": "a.py"}})
    run_tests = json.dumps({"name": "bash", "arguments": {"command": "exit 3"}})
    server = ScriptedServer(
        [
            Reply(content=[read]),
            Reply(content=[run_tests]),
            Reply(content=[read]),
            Reply(content=['{"answer":"exit 3"}']),
            Reply(content=[read]),
            Reply(content=['{"answer":"ok"}']),
        ]
    )
    agent = make_agent(
        server,
        workspace,
        structured_tools=True,
        step_name_key="name",
        task_reminder=True,
        questions_read_only=True,
    )
    await run(agent, "Run the tests and tell me which exit code they give. Do not change any file.")
    results = [server.requests[n]["messages"][-1]["content"] for n in (1, 2, 3)]
    assert results[0].endswith(
        "No file is to be changed. It asks for a run that has not been made yet: make it with "
        'bash, then reply {"answer":"..."} with what it showed.)'
    )
    assert results[1].startswith("exit code 3") and results[1].endswith(
        'Reply {"answer":"..."} as soon as you know the answer; otherwise make the next tool call.)'
    )
    assert "has not been made" not in results[2]
    # A change task: the same, in the task's words; a new turn asks again.
    await run(agent, "Fix a.py, then run the tests.")
    pending = server.requests[5]["messages"][-1]["content"]
    assert pending.endswith(
        "It asks for a run that has not been made yet (bash). Reply with "
        'the next step: another tool call, or {"answer":"..."} if the '
        "task is done.)"
    )


async def test_run_before_answer_holds_the_answer_until_bash_has_run(workspace: Path) -> None:
    """``run_before_answer``: while the asked-for run is due, the step schema has no answer
    (at most RUN_BEFORE_ANSWER_REQUESTS requests); once bash ran, the answer is back.
    Without small-model mode the same holds through ``tool_choice: "required"``."""
    (workspace / "a.py").write_text("x = 1\n")
    read = json.dumps({"name": "read_file", "arguments": {"path": "a.py"}})
    ran = json.dumps({"name": "bash", "arguments": {"command": "true"}})
    server = ScriptedServer(
        [Reply(content=[read]), Reply(content=[ran]), Reply(content=['{"answer":"ok"}'])]
        + [
            Reply(
                content=[
                    json.dumps(
                        {
                            "name": "read_file",
                            "arguments": {"path": "a.py", "start_line": 1, "end_line": n},
                        }
                    )
                ]
            )
            for n in range(1, 5)
        ]
        + [Reply(content=['{"answer":"no run"}'])]
    )
    agent = make_agent(
        server, workspace, structured_tools=True, step_name_key="name", run_before_answer=True
    )
    await run(agent, "Run the tests and tell me if they pass.")
    schemas = [_names(r["structured_outputs"]["json"]) for r in server.requests[:3]]
    assert ["ANSWER" in names for names in schemas] == [False, False, True]
    # A turn that cannot get to a run may answer after the fourth request.
    events = await run(agent, "Run the tests and tell me if they pass.")
    schemas = [_names(r["structured_outputs"]["json"]) for r in server.requests[3:8]]
    assert ["ANSWER" in names for names in schemas] == [False, False, False, False, True]
    assert of(events, ToolCallFinished)[-1].name == "read_file"
    # Not asked for a run: the answer is there from the first request.
    server.replies.append(Reply(content=['{"answer":"1"}']))
    await run(agent, "Read a.py and tell me x.")
    assert "ANSWER" in _names(server.requests[8]["structured_outputs"]["json"])


async def test_run_before_answer_without_small_model_mode_requires_a_call(workspace: Path) -> None:
    server = ScriptedServer(
        [Reply(tool_calls=[("bash", json.dumps({"command": "true"}))]), Reply(content=["passed"])]
    )
    agent = make_agent(server, workspace, run_before_answer=True)
    await run(agent, "Run the tests.")
    assert [r.get("tool_choice") for r in server.requests] == ["required", "auto"]
