"""The syntax guard: an edit that would leave a Python, JSON or TOML file unparsable
is refused before anything is written (``[agent] refuse_syntax_errors``).

SWE-agent's edit command refuses an edit that introduces a syntax error, shows
where, and says the file was left as it was; its paper's ablation measured more
issues resolved with that guard than without (18.0% against 15.0% of SWE-bench
Lite, GPT-4). The small local models fail the same way: in a tmux run on
2026-12-03 Qwen2.5-Coder-1.5B turned ``def to_celsius(fahrenheit):`` into
``def to_celsius(fahrenheit) # Fixing incorrect calculation:`` and, the file now
broken, overwrote it with one unrelated line (docs/agent.md). A refused edit
leaves the file runnable and tells the model what it wrote wrong.

Only a file that parsed before (or did not exist) is held to it, so a file that
is already broken can still be edited step by step. Python is parsed by the
Python sparkcode runs on, which the message names: syntax newer than that
interpreter is refused as well, the reason the guard is a setting, off by default.
"""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

from ..._pyparse import parse
from ._base import ToolContext, ToolError

_CONTEXT = 2
"""Lines of the new text shown either side of the error's line."""

_PYTHON = f"Python {sys.version_info.major}.{sys.version_info.minor}"


def _python_error(text: str) -> tuple[int, str] | None:
    try:
        parse(text)
    except SyntaxError as exc:
        return exc.lineno or 1, f"{exc.msg} (as {_PYTHON} parses it)"
    except ValueError as exc:  # source with a NUL byte
        return 1, str(exc)
    return None


def _json_error(text: str) -> tuple[int, str] | None:
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        return exc.lineno, exc.msg
    return None


def _toml_error(text: str) -> tuple[int, str] | None:
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        # "Expected '=' after a key in a key/value pair (at line 3, column 5)"
        line = 1
        if "(at line " in message:
            where = message.rsplit("(at line ", 1)[1]
            digits = where.split(",", 1)[0].rstrip(")")
            line = int(digits) if digits.isdigit() else 1
            message = message.rsplit(" (at line ", 1)[0]
        return line, message
    return None


_PARSERS = {
    ".py": ("Python", _python_error),
    ".pyi": ("Python", _python_error),
    ".json": ("JSON", _json_error),
    ".toml": ("TOML", _toml_error),
}


def _lines_around(text: str, line: int) -> str:
    lines = text.splitlines()
    first, last = max(1, line - _CONTEXT), min(len(lines), line + _CONTEXT)
    width = len(str(last))
    return "\n".join(
        f"{'>' if n == line else ' '} {n:>{width}} | {lines[n - 1]}" for n in range(first, last + 1)
    )


def syntax_refusal(path: Path, shown: str, old: str | None, new: str) -> str | None:
    """Why writing ``new`` to ``path`` (``old``: its text now, None when it does not
    exist) is refused, or None. Only a file that parses now (or is new or empty) is
    held to parse after; emptying a file is never refused."""
    language, parse = _PARSERS.get(path.suffix.lower(), (None, None))
    if parse is None or language is None:
        return None
    if not new.strip() or old is not None and old.strip() and parse(old) is not None:
        return None  # emptied, or broken already: left to the model to mend step by step
    error = parse(new)
    if error is None:
        return None
    line, message = error
    shown_lines = _lines_around(new, line)
    return (
        f"{shown} was not changed: the result would not be valid {language}: "
        f"line {line}: {message}. The lines as they would have been:\n{shown_lines}\n"
        f"The file is as it was; send the change again with that fixed."
    )


def refuse_broken_syntax(
    ctx: ToolContext, path: Path, shown: str, old: str | None, new: str
) -> None:
    """Raise :func:`syntax_refusal`'s reason as a ToolError where the context asks
    for the guard."""
    if ctx.refuse_syntax_errors:
        refusal = syntax_refusal(path, shown, old, new)
        if refusal:
            raise ToolError(refusal)
