"""What an edit's result adds after the edit: names it removed that other files
still use, then what the language server found (``ctx.checker``).

A rename is several edits, and a small model stops after the first: in the agent
suite the Qwen2.5-Coder-1.5B renamed the function in one file of two or three and
answered, 0 of 9 rename tries (docs/agent.md). The result of that first edit now
says where the old name is still used (``calc_total`` is gone from shop.py but still
used in main.py (lines 1, 4), test_shop.py (lines 3, 8)), and the turn keeps the
plain reminder instead of the one that invites an answer
(:data:`~sparkcode.agent.scaffold.prompts.CHANGED_REMINDER`). The same line tells any
model that a function it deleted is still called elsewhere. An edit whose file the
language server finds new problems in is unfinished too: told "from a import
old_name" -> "new_name" and basedpyright's '"old_name" is not defined' on line 3,
the 1.5B answered "Renamed ... in both" under the reminder that invites an answer.

An edit that only swaps one identifier for another (:func:`renamed`) is a rename
step even when the old name stays in the file: told where ``calc_total`` is left,
the 1.5B renamed it in main.py's ``print(...)`` line, and with basedpyright's
'"total_price" is not defined' for that line it ran pyright instead of fixing the
import on line 1. Such a note counts the edited file's own lines too
(``calc_total`` (renamed total_price here) is still used in main.py (line 1), ...).
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
MAX_QUOTED, QUOTE_CHARS = 6, 120
"""Lines quoted under the note (each cut at this many characters): the text to copy
into ``old_string``. Given only line numbers, the 1.5B ran pydoc on the files and
edited main.py's import only after an ImportError showed it."""
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


def renamed(before: str, after: str) -> tuple[str, str] | None:
    """``(old, new)`` when the edit changed nothing but occurrences of one identifier
    into another the file did not have (its identifiers, in order, differ only there),
    else None. A name the file already had is not a rename: ``return total`` made
    ``return count`` beside ``count = 0`` fixes a bug."""
    old_ids, new_ids = _IDENT.findall(before), _IDENT.findall(after)
    if len(old_ids) != len(new_ids):
        return None
    swaps = {(a, b) for a, b in zip(old_ids, new_ids, strict=True) if a != b}
    if len(swaps) != 1:
        return None
    [(old, new)] = swaps
    if len(old) < MIN_NAME or keyword.iskeyword(old) or new in old_ids:
        return None
    return old, new


def _places(
    root: Path, path: Path, after: str, names: list[str], here: str | None
) -> dict[str, dict[str, list[tuple[int, str]]]]:
    """Lines (number, text) by file of each of ``names`` in the project's text files;
    in the edited file (``path``, text ``after``) only those of ``here``."""
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    places: dict[str, dict[str, list[tuple[int, str]]]] = {}
    for n, other in enumerate(walk_files(root, root)):
        if n == SCAN_FILES:
            break
        try:
            this = other.resolve() == path
            if this and here is None or other.stat().st_size > SCAN_BYTES:
                continue
            text = after if this else other.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        rel = str(other.relative_to(root))
        for number, line in enumerate(text.splitlines(), 1):
            for name in set(pattern.findall(line)):
                if not this or name == here:
                    places.setdefault(name, {}).setdefault(rel, []).append((number, line))
    return places


def names_left(workspace: Path, path: Path, shown: str, before: str, after: str) -> str:
    """The note for names the edit of ``path`` removed that other project files still
    use, or that it renamed in part (:func:`renamed`), or "" when there are none."""
    names = removed_names(before, after)
    pair = renamed(before, after)
    here = pair[0] if pair is not None and pair[0] not in names else None
    if here is not None:
        names.insert(0, here)
    if not names:
        return ""
    places = _places(workspace.resolve(), path, after, names, here)
    found = [name for name in names if name in places][:MAX_NAMES]
    if not found:
        return ""
    parts, quoted = [], []
    for name in found:
        files = sorted(places[name].items())
        where = ", ".join(
            f"{rel} (line{'s' if len(lines) > 1 else ''} "
            f"{', '.join(str(n) for n, _ in lines[:MAX_LINES])}"
            f"{', ...' if len(lines) > MAX_LINES else ''})"
            for rel, lines in files[:MAX_FILES]
        )
        quoted += [
            f"{rel}:{n}: {text.strip()[:QUOTE_CHARS]}"
            for rel, lines in files[:MAX_FILES]
            for n, text in lines[:MAX_LINES]
        ]
        more = f" and {len(files) - MAX_FILES} more files" if len(files) > MAX_FILES else ""
        if name == here and pair is not None:
            parts.append(f"{name} (renamed {pair[1]} here) is still used in {where}{more}")
        else:
            parts.append(f"{name} is gone from {shown} but still used in {where}{more}")
    lines = "\n".join(dict.fromkeys(quoted[:MAX_QUOTED]))
    return f"{NAMES_LEFT}{'; '.join(parts)}.\n{lines}"


async def checked_edit(
    ctx: ToolContext, output: ToolOutput, path: Path, shown: str, before: str, after: str
) -> ToolOutput:
    """``output`` with the names the edit left behind and what ``ctx.checker`` found in
    the edited file appended; either makes it :attr:`~ToolOutput.unfinished`."""
    left = await asyncio.to_thread(names_left, ctx.workspace, path.resolve(), shown, before, after)
    if left:
        output = replace(output, text=output.text + left, unfinished=True)
    if ctx.checker is None:
        return output
    feedback = await ctx.checker.check(path, shown, before, after)
    if not feedback.text:
        return replace(output, notice=feedback.notice)
    return replace(
        output, text=f"{output.text}\n\n{feedback.text}", notice=feedback.notice, unfinished=True
    )
