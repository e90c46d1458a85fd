"""Which diagnostics an edit introduced, and how they read in the edit's result.

Pure functions: the server's diagnostics before and after the edit in, text out.
"""

from __future__ import annotations

import difflib
from collections import defaultdict
from typing import Any

from ...config import SEVERITIES, Severity

Diagnostic = dict[str, Any]

ITEM_CHARS = 300
"""Characters of one problem's line at most: pyright's message for a mismatched
overload lists every overload (2,000+ characters for ``open``); its first line says
what is wrong."""


def severity_of(diagnostic: Diagnostic) -> int:
    """1 (error) .. 4 (hint); a diagnostic without one counts as an error (LSP leaves
    it to the client, and editors show it as one)."""
    value = diagnostic.get("severity")
    return value if isinstance(value, int) and 1 <= value <= 4 else 1


def _key(diagnostic: Diagnostic) -> tuple[Any, ...]:
    """What makes two diagnostics the same problem. Not the position: an edit above
    a problem moves it without fixing or causing it."""
    code = diagnostic.get("code")
    return (
        severity_of(diagnostic),
        str(diagnostic.get("source", "")),
        str(code) if code is not None else "",
        str(diagnostic.get("message", "")),
    )


def moved_lines(before: str, after: str) -> dict[int, int]:
    """Where each line the edit left alone went (0-based, before -> after)."""
    matcher = difflib.SequenceMatcher(None, before.splitlines(), after.splitlines(), autojunk=False)
    return {a + n: b + n for a, b, size in matcher.get_matching_blocks() for n in range(size)}


def introduced(
    before: list[Diagnostic],
    after: list[Diagnostic],
    least: Severity = "error",
    moved: dict[int, int] | None = None,
) -> list[Diagnostic]:
    """The diagnostics of ``after`` that ``before`` did not have, at ``least``
    severity, sorted by position. A problem of ``before`` is matched first to the same
    problem where its line moved (``moved``, from :func:`moved_lines`), then to any
    copy left: two copies of one message after an edit, one of them old, report the
    one on the new line."""
    limit = SEVERITIES.index(least) + 1
    known: dict[tuple[Any, ...], list[int | None]] = defaultdict(list)
    for diagnostic in before:
        line = _position(diagnostic)[0]
        known[_key(diagnostic)].append(moved.get(line) if moved is not None else None)
    unmatched = []
    for diagnostic in after:
        lines = known[_key(diagnostic)]
        line = _position(diagnostic)[0]
        if line in lines:
            lines.remove(line)
        else:
            unmatched.append(diagnostic)
    new = []
    for diagnostic in unmatched:
        lines = known[_key(diagnostic)]
        if lines:
            lines.pop()
        elif severity_of(diagnostic) <= limit:
            new.append(diagnostic)
    return sorted(new, key=_position)


def _position(diagnostic: Diagnostic) -> tuple[int, int]:
    start = (diagnostic.get("range") or {}).get("start") or {}
    line, char = start.get("line", 0), start.get("character", 0)
    return (line if isinstance(line, int) else 0, char if isinstance(char, int) else 0)


def line_of(diagnostic: Diagnostic, shown: str) -> str:
    """``path:line:col: severity: message (code)``, 1-based, on one line."""
    line, char = _position(diagnostic)
    message = "; ".join(
        part.strip()
        for part in str(diagnostic.get("message", "")).replace("\xa0", " ").splitlines()
        if part.strip()
    )
    code = diagnostic.get("code")
    text = (
        f"{shown}:{line + 1}:{char + 1}: {SEVERITIES[severity_of(diagnostic) - 1]}: "
        f"{message}" + (f" ({code})" if code not in (None, "") else "")
    )
    return text if len(text) <= ITEM_CHARS else text[: ITEM_CHARS - 3] + "..."


def render(
    new: list[Diagnostic], shown: str, server: str, *, max_items: int, max_chars: int
) -> str:
    """The block appended to an edit's result; empty when nothing is new. ``server``
    names the source unless the diagnostics name it (``source``: basedpyright)."""
    if not new:
        return ""
    server = str(new[0].get("source") or server)
    noun = "problem" if len(new) == 1 else "problems"
    lines = [f"[{server} found {len(new)} new {noun} in {shown} after this edit:]"]
    used = len(lines[0]) + len(f"\n[and {len(new)} more]")
    shown_count = 0
    for diagnostic in new[:max_items]:
        line = line_of(diagnostic, shown)
        if used + len(line) + 1 > max_chars:
            break
        lines.append(line)
        used += len(line) + 1
        shown_count += 1
    if shown_count < len(new):
        lines.append(f"[and {len(new) - shown_count} more]")
    return "\n".join(lines)
