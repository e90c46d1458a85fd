"""``[agent] attach_files``: the project (or the files a message names) goes with the
user's message, the task reminder stays the bare task, and a notice says what was sent."""

from __future__ import annotations

from pathlib import Path

from sparkcode.agent import Notice
from sparkcode.agent.scaffold.attach import attachment
from tests.sparkcode.agent.core.test_loop import make_agent, of, run
from tests.support.scripted import Reply, ScriptedServer


def _project(ws: Path) -> None:
    (ws / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (ws / "tests").mkdir()
    (ws / "tests" / "test_calc.py").write_text("from calc import add\n")
    (ws / ".gitignore").write_text("__pycache__/\n")
    (ws / "__pycache__").mkdir()
    (ws / "__pycache__" / "calc.pyc").write_bytes(b"\x00\x01")
    (ws / "logo.bin").write_bytes(b"\x89PNG\x00\x00")


def test_a_small_project_is_attached_whole_named_files_first(workspace: Path) -> None:
    _project(workspace)
    got = attachment("the test in test_calc.py fails", workspace, 8000)
    assert got is not None and got.whole_project
    # Named first; hidden files, skipped directories and binary files are left out.
    assert got.paths == ("tests/test_calc.py", "calc.py")
    assert got.text == (
        "The project's files as the task starts:\n\n"
        "tests/test_calc.py\n```\nfrom calc import add\n```\n\n"
        "calc.py\n```\ndef add(a, b):\n    return a - b\n```"
    )


def test_a_larger_project_gets_only_the_named_files_that_fit(workspace: Path) -> None:
    _project(workspace)
    (workspace / "big.py").write_text("x = 1\n" * 100)  # 600 bytes: not small at 300
    got = attachment("fix calc.py (see tests/test_calc.py, big.py, nothing.py)", workspace, 300)
    assert got is not None and not got.whole_project
    assert got.paths == ("calc.py", "tests/test_calc.py")  # big.py does not fit
    assert got.text.startswith("The files named above, as the task starts:\n\ncalc.py\n")
    assert attachment("what does this project do?", workspace, 300) is None
    assert attachment("fix calc.py", workspace, 0) is None


def test_a_name_two_files_share_is_not_guessed_and_fences_outgrow_the_text(workspace: Path) -> None:
    (workspace / "a").mkdir()
    (workspace / "b").mkdir()
    (workspace / "a" / "util.py").write_text("x = 1\n" * 50)
    (workspace / "b" / "util.py").write_text("y = 2\n" * 50)
    (workspace / "README.md").write_text("Use:\n```\nrun\n```")
    got = attachment("fix util.py and README.md.", workspace, 100)
    assert got is not None and got.paths == ("README.md",)
    assert "README.md\n````\nUse:\n```\nrun\n```\n````" in got.text
    escape = attachment("read ../etc/passwd.txt", workspace, 100)
    assert escape is None


async def test_the_turn_sends_the_files_and_says_so(workspace: Path) -> None:
    _project(workspace)
    server = ScriptedServer(
        [
            Reply(content=['{"name": "read_file", "arguments": {"path": "calc.py"}}']),
            Reply(content=['{"answer": "a - b"}']),
        ]
    )
    agent = make_agent(
        server,
        workspace,
        structured_tools=True,
        step_name_key="name",
        task_reminder=True,
        attach_files=8000,
    )
    events = await run(agent, "what does add in calc.py return?")
    user = server.requests[0]["messages"][1]["content"]
    assert user.startswith(
        "what does add in calc.py return?\n\nThe project's files as the "
        "task starts:\n\ncalc.py\n```\ndef add(a, b):\n"
    )
    notice = [n for n in of(events, Notice) if n.code == "files_attached"]
    assert len(notice) == 1 and notice[0].message.startswith(
        "attached the whole project to the prompt (2 files, "
    )
    # The reminder after a tool result repeats the task, not the attached files.
    result = server.requests[1]["messages"][-1]["content"]
    assert "(The task: what does add in calc.py return?\nReply" in result
    assert result.count("def add") == 1  # the read's own result, no second copy
    plain = make_agent(server, workspace, structured_tools=True, step_name_key="name")
    server.replies.append(Reply(content=['{"answer": "ok"}']))
    await run(plain, "what does add in calc.py return?")
    assert server.requests[-1]["messages"][1]["content"] == "what does add in calc.py return?"
