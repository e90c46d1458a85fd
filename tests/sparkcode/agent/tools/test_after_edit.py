"""After an edit: the names it removed that other files still use are named in its
result, and such a change does not get the reminder that invites the answer."""

from __future__ import annotations

import json
from pathlib import Path

from sparkcode.agent import Agent, AgentSettings, ChatClient, Permissions, ToolCallFinished
from sparkcode.agent.tools import NAMES_LEFT, EditFeedback
from sparkcode.agent.tools._after_edit import (
    MAX_LINES,
    MAX_QUOTED,
    names_left,
    removed_names,
    renamed,
)
from sparkcode.config import Config
from tests.sparkcode.agent.core.test_loop import make_agent, of, run
from tests.support.scripted import Reply, ScriptedServer

SHOP = "def calc_total(prices):\n    return round(sum(prices), 2)\n"
MAIN = (
    "from shop import calc_total\n\nif __name__ == '__main__':\n"
    "    print(calc_total([1.5, 2.25]))\n"
)


def test_removed_names_are_identifiers_gone_from_the_file() -> None:
    before = "def calc_total(prices):\n    return round(sum(prices), 2)\n"
    after = "def total_price(prices):\n    return round(sum(prices), 2)\n"
    assert removed_names(before, after) == ["calc_total"]
    # Short names, keywords and names still in the file are not candidates.
    assert removed_names("x = add(1)\nwhile True: pass\n", "y = 2\n") == []
    assert removed_names("value = value + 1\n", "value = value + 2\n") == []


def test_the_note_names_each_file_and_line_still_using_a_removed_name(tmp_path: Path) -> None:
    (tmp_path / "shop.py").write_text(SHOP.replace("calc_total", "total_price"))
    (tmp_path / "main.py").write_text(MAIN)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_shop.py").write_text(
        "from shop import calc_total\n\n\ndef test_total():\n    assert calc_total([1]) == 1\n"
    )
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "ORIG").write_text("calc_total\n")  # skipped, like every tool
    (tmp_path / "blob.bin").write_bytes(b"\xff\xfe calc_total")  # not text: skipped
    note = names_left(
        tmp_path,
        (tmp_path / "shop.py").resolve(),
        "shop.py",
        SHOP,
        SHOP.replace("calc_total", "total_price"),
    )
    # The lines are quoted too: the text to copy into the next edit's old_string.
    assert note == (
        NAMES_LEFT + "calc_total is gone from shop.py but still used in "
        "main.py (lines 1, 4), tests/test_shop.py (lines 1, 5).\n"
        "main.py:1: from shop import calc_total\n"
        "main.py:4: print(calc_total([1.5, 2.25]))\n"
        "tests/test_shop.py:1: from shop import calc_total\n"
        "tests/test_shop.py:5: assert calc_total([1]) == 1"
    )


def test_nothing_is_said_when_no_other_file_uses_the_name(tmp_path: Path) -> None:
    (tmp_path / "shop.py").write_text("x")
    (tmp_path / "notes.txt").write_text("calc_totals and my_calc_total are other words\n")
    assert names_left(tmp_path, (tmp_path / "shop.py").resolve(), "shop.py", SHOP, "x") == ""


def test_long_lists_are_cut(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("")
    for n in range(7):
        (tmp_path / f"u{n}.py").write_text("old_helper()\n" * (MAX_LINES + 2))
    note = names_left(
        tmp_path, (tmp_path / "a.py").resolve(), "a.py", "def old_helper(): pass\n", ""
    )
    summary, *quoted = note.split("\n")[2:]
    assert summary.count("(lines 1, 2, 3, 4, 5, ...)") == 5 and summary.endswith(
        " and 2 more files."
    )
    assert quoted == [f"u0.py:{n}: old_helper()" for n in range(1, 6)] + ["u1.py:1: old_helper()"]
    assert len(quoted) == MAX_QUOTED


async def test_a_half_done_rename_keeps_the_plain_reminder(workspace: Path) -> None:
    (workspace / "shop.py").write_text(SHOP)
    (workspace / "main.py").write_text(MAIN)
    rename = json.dumps(
        {
            "name": "edit_file",
            "arguments": {
                "path": "shop.py",
                "old_string": "def calc_total",
                "new_string": "def total_price",
            },
        }
    )
    fix = json.dumps(
        {
            "name": "edit_file",
            "arguments": {
                "path": "main.py",
                "old_string": "from shop import calc_total\n",
                "new_string": "from shop import total_price\n",
            },
        }
    )
    last = json.dumps(
        {
            "name": "edit_file",
            "arguments": {
                "path": "main.py",
                "old_string": "print(calc_total(",
                "new_string": "print(total_price(",
            },
        }
    )
    server = ScriptedServer(
        [
            Reply(content=[rename]),
            Reply(content=[fix]),
            Reply(content=[last]),
            Reply(content=['{"answer":"done"}']),
        ]
    )
    agent = make_agent(
        server, workspace, structured_tools=True, step_name_key="name", task_reminder=True
    )
    events = await run(agent, "Rename calc_total to total_price everywhere.")
    half = server.requests[1]["messages"][-1]["content"]
    assert "calc_total is gone from shop.py but still used in main.py (lines 1, 4)" in half
    assert "That change is made" not in half and "Reply with the next step" in half
    # The second edit renames on main.py's line 1 only: the edited file's own line 4
    # is named, and the turn still is not invited to answer.
    more = server.requests[2]["messages"][-1]["content"]
    assert (
        "calc_total (renamed total_price here) is still used in main.py (line 4)." in more
        and "That change is made" not in more
    )
    rest = server.requests[3]["messages"][-1]["content"]
    assert NAMES_LEFT not in rest and "That change is made" in rest
    assert all(f.error is None for f in of(events, ToolCallFinished))


def test_an_edit_that_only_swaps_one_name_is_a_rename() -> None:
    assert renamed(
        "x = calc_total(a) + calc_total(b)\n", "x = total_price(a) + calc_total(b)\n"
    ) == ("calc_total", "total_price")
    # Punctuation and spacing are not identifiers: still a rename.
    assert renamed("print(calc_total([1]))", "print( total_price([1]) )") == (
        "calc_total",
        "total_price",
    )
    assert renamed("a = old_value\n", "a = old_value + 1\n") is None  # a name added
    assert renamed("f(alpha, beta)", "f(gamma, delta)") is None  # two different swaps
    assert renamed("x = 1", "y = 1") is None  # too short to say anything
    assert renamed("same_name = 1", "same_name = 2") is None  # nothing swapped
    # A name the file had already: a fix, not a rename.
    assert renamed("count = 0\nreturn total\n", "count = 0\nreturn count\n") is None


def test_a_rename_in_part_names_the_edited_files_own_lines(tmp_path: Path) -> None:
    after = MAIN.replace("import calc_total", "import total_price")
    (tmp_path / "main.py").write_text(after)
    (tmp_path / "test_shop.py").write_text("from shop import calc_total\n")
    (tmp_path / "notes.py").write_text("other_name = 1\n")
    note = names_left(tmp_path, (tmp_path / "main.py").resolve(), "main.py", MAIN, after)
    assert note == (
        NAMES_LEFT + "calc_total (renamed total_price here) is still used in "
        "main.py (line 4), test_shop.py (line 1).\n"
        "main.py:4: print(calc_total([1.5, 2.25]))\n"
        "test_shop.py:1: from shop import calc_total"
    )
    # Any other name the edited file still has is not searched for.
    other = "other_name = 2\nprint(other_name)\nprint(calc_total)\n"
    assert (
        names_left(
            tmp_path,
            (tmp_path / "main.py").resolve(),
            "main.py",
            other,
            other.replace("print(other_name)", "print(1)"),
        )
        == ""
    )


class _Problems:
    """An EditChecker that reports one new problem after every edit of b.py."""

    async def check(self, path: Path, shown: str, before: str, after: str) -> EditFeedback:
        if shown != "b.py":
            return EditFeedback()
        return EditFeedback(
            text=f"[fake found 1 new problem in {shown} after this edit:]\n"
            f'{shown}:3:7: error: "old_name" is not defined'
        )


async def test_an_edit_that_brings_a_new_problem_keeps_the_plain_reminder(workspace: Path) -> None:
    (workspace / "a.py").write_text("x = 1\n")
    (workspace / "b.py").write_text("from a import old_name\n\nprint(old_name())\n")
    calls = [
        json.dumps(
            {"name": "edit_file", "arguments": {"path": p, "old_string": old, "new_string": new}}
        )
        for p, old, new in [
            ("b.py", "from a import old_name", "from a import new_name"),
            ("a.py", "x = 1", "x = 2"),
        ]
    ]
    server = ScriptedServer(
        [Reply(content=[calls[0]]), Reply(content=[calls[1]]), Reply(content=['{"answer":"done"}'])]
    )
    client = ChatClient("http://engine.test/v1", "m", transport=server.transport())
    agent = Agent(
        client,
        workspace,
        settings=AgentSettings(structured_tools=True, step_name_key="name", task_reminder=True),
        permissions=Permissions(Config(), mode="full-auto"),
        checker=_Problems(),
    )
    await run(agent, "Rename old_name to new_name.")
    flagged = server.requests[1]["messages"][-1]["content"]
    assert '"old_name" is not defined' in flagged and "Reply with the next step" in flagged
    clean = server.requests[2]["messages"][-1]["content"]
    assert "That change is made" in clean
