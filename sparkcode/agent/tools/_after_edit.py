"""What an edit's result adds after the edit: names it removed that other files
still use, then what the language server found (``ctx.checker``).

A rename is several edits, and a small model stops after the first: in the agent
suite the Qwen2.5-Coder-1.5B renamed the function in one file of two or three and
answered, 0 of 9 rename tries (docs/agent.md). The result of that first edit now
says where the old name is still used (``calc_total`` is gone from shop.py but still
used in main.py (lines 1, 4), test_shop.py (lines 3, 8)), and the turn keeps the
plain reminder instead of the one that invites an answer
(:data:`~sparkcode.agent.settings.CHANGED_REMINDER`). The same line tells any
model that a function it deleted is still called elsewhere. An edit whose file the
language server finds new problems in is unfinished too: told "from a import
old_name" -> "new_name" and basedpyright's '"old_name" is not defined' on line 3,
the 1.5B answered "Renamed ... in both" under the reminder that invites an answer.
"""

from __future__ import annotations

import asyncio
import keyword
import re
from dataclasses import replace
from pathlib import Path

from ._base import ToolContext, ToolOutput
from ._walk import walk_files

NAMES_LEFT = "\n\nStill used elsewhere: "
"""Starts the note."""

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MIN_NAME = 4
"""Shorter names (``i``, ``x``, ``add``) are too common to say anything."""
MAX_CANDIDATES = 20
"""Names the edit removed that are searched for, in order of first appearance."""
MAX_NAMES, MAX_FILES, MAX_LINES = 3, 5, 5
"""At most this many names in the note, files per name and line numbers per file."""
SCAN_FILES, SCAN_BYTES = 2000, 256_000
"""Files searched at most (a few ms each), and the largest file searched."""


def removed_names(before: str, after: str) -> list[str]:
    """Identifiers in ``before`` that ``after`` no longer has, in order of appearance."""
    left = set(_IDENT.findall(after))
    seen: dict[str, None] = {}
    for name in _IDENT.findall(before):
        if name not in left and len(name) >= MIN_NAME and not keyword.iskeyword(name):
            seen.setdefault(name, None)
            if len(seen) == MAX_CANDIDATES:
                break
    return list(seen)


def names_left(workspace: Path, path: Path, shown: str, before: str, after: str) -> str:
    """The note for names the edit of ``path`` removed that other project files still
    use, or "" when there are none."""
    names = removed_names(before, after)
    if not names:
        return ""
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    root = workspace.resolve()
    places: dict[str, dict[str, list[int]]] = {}
    for n, other in enumerate(walk_files(root, root)):
        if n == SCAN_FILES:
            break
        try:
            if other.resolve() == path or other.stat().st_size > SCAN_BYTES:
                continue
            text = other.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        rel = str(other.relative_to(root))
        for number, line in enumerate(text.splitlines(), 1):
            for name in set(pattern.findall(line)):
                places.setdefault(name, {}).setdefault(rel, []).append(number)
    found = [name for name in names if name in places][:MAX_NAMES]
    if not found:
        return ""
    parts = []
    for name in found:
        files = sorted(places[name].items())
        where = ", ".join(
            f"{rel} (line{'s' if len(lines) > 1 else ''} "
            f"{', '.join(map(str, lines[:MAX_LINES]))}{', ...' if len(lines) > MAX_LINES else ''})"
            for rel, lines in files[:MAX_FILES])
        more = f" and {len(files) - MAX_FILES} more files" if len(files) > MAX_FILES else ""
        parts.append(f"{name} is gone from {shown} but still used in {where}{more}")
    return NAMES_LEFT + "; ".join(parts) + "."


async def checked_edit(ctx: ToolContext, output: ToolOutput, path: Path, shown: str,
                       before: str, after: str) -> ToolOutput:
    """``output`` with the names the edit left behind and what ``ctx.checker`` found in
    the edited file appended; either makes it :attr:`~ToolOutput.unfinished`."""
    left = await asyncio.to_thread(names_left, ctx.workspace, path.resolve(), shown,
                                   before, after)
    if left:
        output = replace(output, text=output.text + left, unfinished=True)
    if ctx.checker is None:
        return output
    feedback = await ctx.checker.check(path, shown, before, after)
    if not feedback.text:
        return replace(output, notice=feedback.notice)
    return replace(output, text=f"{output.text}\n\n{feedback.text}", notice=feedback.notice,
                   unfinished=True)
