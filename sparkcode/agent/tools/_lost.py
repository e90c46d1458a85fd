"""The lost-definitions guard: a change that would delete a Python file's top-level
functions or classes, or its classes' methods, that the turn's message does not name
is refused (``[agent] refuse_lost_definitions``).

A small model adds to a file by replacing it. Told "Add a function square(x) to mathx.py
..., and add a test for it to test_mathx.py", Qwen2.5-Coder-1.5B wrote mathx.py as
``def square`` alone (``double``, which the tests import, gone), wrote test_mathx.py as
the same function (the test class gone), or replaced ``def within`` by ``def clamp``
with ``edit_file``: 6 of 9 add-function tries of the agent suite ended with a
definition lost (2026-12-04, docs/agent.md). Told to add the test, it replaced
``test_double`` by ``test_square`` (2 of 4 replayed samples): methods count too. The
refusal names what would be lost and how to add instead, and the file stays as it was.
A change that keeps every name (a rewrite of the bodies, a new file) passes; so does
one whose lost names the message names ("rename old_name to new_name", "remove
parse_date"), one that empties the file (as the syntax guard allows), and one of a file
that does not parse now, which the syntax guard leaves to be mended.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from ..._pyparse import parse
from ._base import ToolContext, ToolError


def _definitions(text: str) -> list[str] | None:
    """The names of ``text``'s top-level functions and classes and of its classes'
    methods (``Class.method``), in order; None when it does not parse."""
    try:
        tree = parse(text)
    except (SyntaxError, ValueError):
        return None
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        if isinstance(node, ast.ClassDef):
            names.extend(
                f"{node.name}.{item.name}"
                for item in node.body
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
            )
    return names


def lost_definitions(old: str, new: str, task: str = "") -> list[str]:
    """The top-level functions and classes of ``old``, and its classes' methods, that
    ``new`` does not define and ``task`` does not name (a method by its own name; only
    the methods of a class that ``new`` keeps); none where either does not parse (the
    syntax guard's case, or a broken file) or ``new`` is empty."""
    before, after = _definitions(old), _definitions(new)
    if before is None or after is None or not new.strip():
        return []  # broken, or emptied on purpose (as the syntax guard lets it)
    kept = set(after)
    return [
        name
        for name in before
        if name not in kept
        and ("." not in name or name.split(".", 1)[0] in kept)  # its class is kept
        and not re.search(rf"(?<!\w){re.escape(name.rsplit('.', 1)[-1])}(?!\w)", task)
    ]


def refuse_lost_definitions(
    ctx: ToolContext, path: Path, shown: str, old: str | None, new: str, tool: str = "write_file"
) -> None:
    """Raise the refusal for changing ``old`` (None: a new file) to ``new`` with ``tool``
    where the context asks for the guard and a definition would be lost."""
    if not ctx.refuse_lost_definitions or old is None or path.suffix.lower() not in (".py", ".pyi"):
        return
    lost = lost_definitions(old, new, ctx.task)
    if not lost:
        return
    names = ", ".join(lost[:8]) + (f" and {len(lost) - 8} more" if len(lost) > 8 else "")
    them = "them" if len(lost) > 1 else "it"
    if tool == "write_file":
        raise ToolError(
            f"{shown} was not written: write_file replaces the whole file, and this "
            f"content would delete {names}. The file is as it was. To add to it, use "
            "edit_file with its last lines as old_string and those lines plus the new code "
            f"as new_string; or send write_file again with the whole file, keeping {them}."
        )
    raise ToolError(
        f"{shown} was not changed: this edit would delete {names}, which the task does "
        f"not name. The file is as it was. To add code beside {them}, keep the lines of "
        "old_string in new_string and put the new code after them."
    )


__all__ = ["lost_definitions", "refuse_lost_definitions"]
