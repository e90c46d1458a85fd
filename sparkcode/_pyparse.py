"""``ast.parse`` and ``ast.literal_eval`` that threads may call at once.

CPython 3.11.7 (the CI's Python) keeps the AST converter's recursion counter
in interpreter-wide state, so two threads parsing at once can fail with
``SystemError: AST constructor recursion depth mismatch`` (CPython gh-106905,
fixed in later releases). ``sparkcode bench humaneval --workers 4`` extracts
answers in four threads and failed that way in CI; one lock around every parse
costs nothing next to a model call.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

__all__ = ["literal_eval", "parse"]

_LOCK = threading.Lock()


def parse(source: str) -> ast.Module:
    """``ast.parse(source)``, one thread at a time."""
    with _LOCK:
        return ast.parse(source)


def literal_eval(source: str) -> Any:
    """``ast.literal_eval(source)``, one thread at a time."""
    with _LOCK:
        return ast.literal_eval(source)
