"""The lost-definitions guard: a ``write_file`` that would delete a Python file's
top-level functions or classes is refused (``[agent] refuse_lost_definitions``).

``write_file`` replaces a whole file, and a small model uses it to *add* to one. Told
"Add a function square(x) to mathx.py ..., and add a test for it to test_mathx.py",
Qwen2.5-Coder-1.5B wrote mathx.py as ``def square`` alone (``double``, which the tests
import, gone) and then test_mathx.py as the same function (the test class gone); in the
agent suite 8 of 9 add-function tries ended with such a file (2026-12-04,
docs/agent.md). The refusal names what would be lost and the way to add instead, and
the file stays as it was. A write that keeps every name (a rewrite of the bodies, a
new file) passes; so does one of a file that does not parse now, which the syntax
guard leaves to be mended.
"""

from __future__ import annotations

import ast
from pathlib import Path

from ._base import ToolContext, ToolError


def _definitions(text: str) -> list[str] | None:
    """The names of ``text``'s top-level functions and classes, in order; None when it
    does not parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    return [node.name for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]


def lost_definitions(old: str, new: str) -> list[str]:
    """The top-level functions and classes of ``old`` that ``new`` does not define;
    none where either does not parse (the syntax guard's case, or a broken file)."""
    before, after = _definitions(old), _definitions(new)
    if before is None or after is None:
        return []
    kept = set(after)
    return [name for name in before if name not in kept]


def refuse_lost_definitions(ctx: ToolContext, path: Path, shown: str, old: str | None,
                            new: str) -> None:
    """Raise the refusal for writing ``new`` over ``old`` (None: a new file) where the
    context asks for the guard and a definition would be lost."""
    if not ctx.refuse_lost_definitions or old is None or path.suffix.lower() not in (
            ".py", ".pyi"):
        return
    lost = lost_definitions(old, new)
    if not lost:
        return
    names = ", ".join(lost[:8]) + (f" and {len(lost) - 8} more" if len(lost) > 8 else "")
    raise ToolError(
        f"{shown} was not written: write_file replaces the whole file, and this content "
        f"would delete {names}. The file is as it was. To add to it, use edit_file with "
        "its last lines as old_string and those lines plus the new code as new_string; "
        "or send write_file again with the whole file, keeping "
        f"{'them' if len(lost) > 1 else 'it'}.")


__all__ = ["lost_definitions", "refuse_lost_definitions"]
