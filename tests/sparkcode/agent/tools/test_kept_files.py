"""``[agent] keep_told_files``: the files a message says not to change (the tests, a
named file) are refused to the edit tools for that turn, with a notice; the next turn
is free again. The words (``questions.kept_files``), the paths (``tools._kept``) and
the loop, on real files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sparkcode.agent import Notice, ToolCallFinished
from sparkcode.agent.scaffold.message_words import kept_files
from sparkcode.agent.tools import KeptFiles, ToolContext, ToolError, default_tools, is_test_file
from sparkcode.bench._agent_tasks import load_tasks
from tests.sparkcode.agent.core.test_loop import make_agent, of, run
from tests.support.scripted import Reply, ScriptedServer


@pytest.mark.parametrize(
    ("text", "tests", "names"),
    [
        (
            "The tests in test_stats.py fail. Find the bug in stats.py and fix it. Do not change "
            "the tests.",
            True,
            set(),
        ),
        (
            "Run the tests, find the bug they show in inventory.py and fix the code (not the "
            "tests).",
            True,
            set(),
        ),
        ("Keep the tests passing and do not change them.", True, set()),
        ("Fix the bug without changing the tests.", True, set()),
        ("Leave the tests alone and make add() right.", True, set()),
        (
            "Do not edit test_temps.py. The bug is in temps.py: fix it there.",
            False,
            {"test_temps.py"},
        ),
        ("Don't touch `config.toml`.", False, {"config.toml"}),
        # Asking for a change to the tests, or only for behaviour to stay, keeps nothing.
        (
            "Add a function square(x) to mathx.py and add a test for it to test_mathx.py.",
            False,
            set(),
        ),
        ("Fix the tests.", False, set()),
        ("Behaviour must not change; keep the tests passing.", False, set()),
        (
            "Rename calc_total to total_price everywhere: shop.py, main.py and the tests.",
            False,
            set(),
        ),
    ],
)
def test_the_words_that_keep_files(text: str, tests: bool, names: set[str]) -> None:
    kept = kept_files(text)
    assert (kept.tests, set(kept.names)) == (tests, names)


@pytest.mark.parametrize(
    ("text", "failing", "instead"),
    [
        (
            "test_temps.py fails.\nRun the tests with python -m unittest,\n"
            "fix the bug in temps.py, then run the tests again.",
            {"test_temps.py"},
            ("temps.py",),
        ),
        ("test_calc.py is failing; fix calc.py.", {"test_calc.py"}, ("calc.py",)),
        # Nothing else named to change, or the test itself to fix: the test may change.
        ("test_calc.py fails. Fix it.", set(), ()),
        ("Fix test_calc.py, it fails.", set(), ()),
        (
            "test_calc.py fails because calc.py and test_calc.py disagree; fix test_calc.py.",
            set(),
            (),
        ),
        # A failing file that is not a test is no spec.
        ("calc.py fails on empty input; fix it in calc.py.", set(), ()),
    ],
)
def test_a_failing_test_is_kept_while_other_named_files_are_fixed(
    text: str, failing: set[str], instead: tuple[str, ...]
) -> None:
    kept = kept_files(text)
    assert (set(kept.failing), kept.instead) == (failing, instead)
    for name in failing:
        assert kept.why(name) == (
            f"the task says {name} fails, so it shows what the code "
            f"must do; change {' and '.join(instead)} instead"
        )
    assert kept.why("temps.py") is None and kept.why("calc.py") is None


def test_the_notice_says_what_is_kept_and_why() -> None:
    both = kept_files("test_calc.py fails. Fix calc.py and do not edit config.toml.")
    assert both.describe() == (
        "this message says not to change config.toml; it says test_calc.py fails and asks "
        "for a change in calc.py, so edits of config.toml and test_calc.py are refused this "
        "turn ([agent] keep_told_files)"
    )
    told = kept_files("Do not change the tests. Do not edit util.py.")
    assert told.describe() == (
        "this message says not to change the tests and util.py, so "
        "edits of the tests and util.py are refused this turn ([agent] "
        "keep_told_files)"
    )


def test_the_suites_tasks_that_forbid_test_changes_are_read_so() -> None:
    keeping = {task.id for task in load_tasks().values() if kept_files(task.prompt).tests}
    assert keeping == {
        "fix-test-mean",
        "fix-test-stock",
        "fix-test-words",
        "refactor-helper",
        "refactor-sum",
    }


@pytest.mark.parametrize(
    ("path", "test"),
    [
        ("test_calc.py", True),
        ("calc_test.py", True),
        ("tests/helpers.py", True),
        ("src/__tests__/a.js", True),
        ("web/a.spec.ts", True),
        ("conftest.py", True),
        ("calc.py", False),
        ("testing.py", False),
        ("contest.py", False),
        ("latest/x.py", False),
    ],
)
def test_test_files(path: str, test: bool) -> None:
    assert is_test_file(path) is test


async def test_the_edit_tools_refuse_a_kept_file_and_change_nothing(workspace: Path) -> None:
    (workspace / "test_calc.py").write_text("assert True\n")
    (workspace / "calc.py").write_text("x = 1\n")
    tools = default_tools()
    ctx = ToolContext(workspace=workspace, kept=KeptFiles(tests=True, names=frozenset({"calc.py"})))
    calls: list[tuple[str, dict[str, Any]]] = [
        ("edit_file", {"path": "test_calc.py", "old_string": "True", "new_string": "1"}),
        ("write_file", {"path": "test_calc.py", "content": ""}),
        (
            "multi_edit",
            {"path": "test_calc.py", "edits": [{"old_string": "True", "new_string": "1"}]},
        ),
        ("write_file", {"path": "tests/test_new.py", "content": "assert 1\n"}),
    ]
    for name, args in calls:
        tool = tools.get(name)
        assert tool is not None
        with pytest.raises(
            ToolError,
            match=r"was not changed: the task says not to change "
            r"the tests; change the code they test instead",
        ):
            await tool.run(args, ctx)
    edit = tools.get("edit_file")
    assert edit is not None
    with pytest.raises(
        ToolError,
        match="^calc.py was not changed: the task says not to change calc.py; leave it as it is$",
    ):
        await edit.run({"path": "calc.py", "old_string": "1", "new_string": "2"}, ctx)
    assert (workspace / "test_calc.py").read_text() == "assert True\n"
    assert (workspace / "calc.py").read_text() == "x = 1\n"
    assert not (workspace / "tests").exists()
    (workspace / "other.py").write_text("y = 1\n")
    await edit.run({"path": "other.py", "old_string": "1", "new_string": "2"}, ctx)
    assert (workspace / "other.py").read_text() == "y = 2\n"


async def test_the_loop_keeps_them_for_one_turn_and_says_so(workspace: Path) -> None:
    (workspace / "test_calc.py").write_text("assert True\n")
    edit = json.dumps(
        {
            "name": "edit_file",
            "arguments": {"path": "test_calc.py", "old_string": "True", "new_string": "1"},
        }
    )
    server = ScriptedServer(
        [
            Reply(content=[edit]),
            Reply(content=['{"answer":"no"}']),
            Reply(content=[edit]),
            Reply(content=['{"answer":"ok"}']),
        ]
    )
    agent = make_agent(
        server, workspace, structured_tools=True, step_name_key="name", keep_told_files=True
    )
    events = await run(agent, "Fix calc.py; do not change the tests.")
    notices = [n for n in of(events, Notice) if n.code == "files_kept"]
    assert [n.message for n in notices] == [
        "this message says not to change the tests, so edits of the tests are refused this "
        "turn ([agent] keep_told_files)"
    ]
    assert of(events, ToolCallFinished)[0].error is not None
    assert (workspace / "test_calc.py").read_text() == "assert True\n"
    events = await run(agent, "Now change test_calc.py to assert 1.")
    assert of(events, ToolCallFinished)[0].error is None
    assert (workspace / "test_calc.py").read_text() == "assert 1\n"
    assert not [n for n in of(events, Notice) if n.code == "files_kept"]
