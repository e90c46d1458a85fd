"""Fingerprints of Python functions, stable across formatting and Python versions.

A fingerprint is a hash of a function's token stream with comments, blank lines,
the docstring and line-wrapping removed. Two sources that differ only in those
get the same fingerprint; any change to code (a name, an operator, a constant)
gives a different one. Tokens rather than ``ast.dump`` are hashed because the
AST's shape changes between Python versions (3.12 added ``type_params``), while
the engine on the Spark may run another Python than this machine.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import io
import textwrap
import tokenize
from collections.abc import Callable
from typing import Any

_DROPPED = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING, tokenize.ENDMARKER}


def _docstring_lines(source: str) -> set[int]:
    """Line numbers (1-based) of the first function's docstring in ``source``."""
    tree = ast.parse(source)
    func = next(
        (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None
    )
    if func is None or not func.body:
        return set()
    first = func.body[0]
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        end = first.end_lineno or first.lineno
        return set(range(first.lineno, end + 1))
    return set()


def normalised_tokens(source: str) -> list[str]:
    """The significant tokens of one function's source, docstring excluded."""
    source = textwrap.dedent(source)
    doc_lines = _docstring_lines(source)
    out: list[str] = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in _DROPPED:
            continue
        if tok.type == tokenize.STRING and tok.start[0] in doc_lines:
            continue
        if tok.type == tokenize.NEWLINE:
            if out and out[-1] not in ("<NL>", "<IN>", "<DE>"):
                out.append("<NL>")
        elif tok.type == tokenize.INDENT:
            out.append("<IN>")
        elif tok.type == tokenize.DEDENT:
            out.append("<DE>")
        else:
            out.append(tok.string)
    # Decorators are not part of the body that is replaced; start at ``def``.
    start = next((i for i, t in enumerate(out) if t in ("def", "async")), 0)
    return out[start:]


def fingerprint_source(source: str) -> str:
    """The 16-hex-digit fingerprint of one function's source text."""
    joined = " ".join(normalised_tokens(source))
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()[:16]


def fingerprint(func: Callable[..., Any]) -> str:
    """The fingerprint of a live function (via :func:`inspect.getsource`)."""
    return fingerprint_source(inspect.getsource(func))


def function_source(module_source: str, qualname: str) -> str | None:
    """The source of ``Class.method`` or ``function`` inside a module's text."""
    tree = ast.parse(module_source)
    parts = qualname.split(".")
    scope: list[ast.stmt] = tree.body
    node: ast.AST | None = None
    for part in parts:
        node = next(
            (
                n
                for n in scope
                if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and n.name == part
            ),
            None,
        )
        if node is None:
            return None
        scope = node.body
    segment = ast.get_source_segment(module_source, node, padded=True) if node else None
    return segment
