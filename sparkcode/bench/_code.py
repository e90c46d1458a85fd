"""From a model's answer to a program that tests it: the same extraction for
every target.

1. The code: the first fenced block (```python, ```py or a bare fence; an
   unclosed last fence runs to the end) that defines the entry point; else the
   longest such block; else, without fences, the answer from its first line
   that starts ``def``, ``class``, ``import`` or ``from``.
2. EvalPlus-style sanitizing: the longest prefix that parses, then only the
   top-level imports, functions, classes and assignments are kept (test code,
   prints and ``if __name__`` blocks are dropped).
3. If that defines no entry point, the answer is taken as the body that
   continues the prompt (``prompt + answer``), the completion-style reading.
4. The prompt's own import lines go first (``from typing import List``), since
   answers often drop them.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from .._pyparse import parse

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)
_PY = {"", "python", "py", "python3"}
_KEEP = (
    ast.Import,
    ast.ImportFrom,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Assign,
    ast.AnnAssign,
)


def _defines(code: str, name: str) -> bool:
    return re.search(rf"^\s*(?:async\s+)?def\s+{re.escape(name)}\s*\(", code, re.M) is not None


def _parsable_prefix(code: str) -> ast.Module | None:
    lines = code.splitlines()
    for end in range(len(lines), 0, -1):
        try:
            return parse("\n".join(lines[:end]))
        except (SyntaxError, ValueError):
            continue
    return None


def sanitize(code: str) -> str:
    """Top-level imports, definitions and assignments of the longest parsable prefix."""
    tree = _parsable_prefix(code)
    if tree is None:
        return ""
    kept = [node for node in tree.body if isinstance(node, _KEEP)]
    return "\n\n".join(ast.unparse(node) for node in kept)


def extract_code(answer: str, entry_point: str) -> tuple[str, str]:
    """The code in ``answer`` and how it was found (``fence``, ``fence-longest``,
    ``bare`` or ``none``), sanitized."""
    blocks = [body for lang, body in _FENCE.findall(answer) if lang.lower() in _PY]
    how = "none"
    code = ""
    defining = [b for b in blocks if _defines(b, entry_point)]
    if defining:
        code, how = defining[0], "fence"
    elif blocks:
        code, how = max(blocks, key=len), "fence-longest"
    else:
        match = re.search(r"^(?:def |class |import |from |async def )", answer, re.M)
        if match:
            code, how = answer[match.start() :], "bare"
    return sanitize(code) if code else "", how


def prompt_imports(prompt: str) -> str:
    return "\n".join(line for line in prompt.splitlines() if line.startswith(("import ", "from ")))


def build_solution(problem: dict[str, Any], answer: str) -> tuple[str, str]:
    """The solution program text (no tests) and how the code was found."""
    entry = str(problem["entry_point"])
    code, how = extract_code(answer, entry)
    if not _defines(code, entry):
        # A body continuing the prompt (what completion-style harnesses expect).
        code, how = str(problem["prompt"]) + answer, how + "+continuation"
    return prompt_imports(str(problem["prompt"])) + "\n\n" + code, how


def base_program(problem: dict[str, Any], solution: str) -> str:
    """The solution followed by HumanEval's own ``check`` and its call."""
    return f"{solution}\n\n{problem['test']}\n\ncheck({problem['entry_point']})\n"


_PLUS_RUNNER = """
import copy as _copy, json as _json, math as _math, sys as _sys
_inputs = _json.loads({inputs})
_ref_ns = {{}}
exec({reference}, _ref_ns)
_reference = _ref_ns[{entry}]
_candidate = {entry_name}
_atol = {atol}

def _same(got, want):
    if isinstance(want, float) or isinstance(got, float):
        if not isinstance(got, (int, float)) or not isinstance(want, (int, float)):
            return False
        if _math.isnan(want):
            return _math.isnan(got)
        if _atol:
            return abs(got - want) <= _atol
        return _math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-6)
    if isinstance(want, (list, tuple)) and isinstance(got, (list, tuple)):
        return type(got) is type(want) and len(got) == len(want) and \\
            all(_same(a, b) for a, b in zip(got, want))
    return got == want

for _i, _args in enumerate(_inputs):
    _want = _reference(*_copy.deepcopy(_args))
    _got = _candidate(*_copy.deepcopy(_args))
    if not _same(_got, _want):
        print(f"input {{_i}}: {{repr(_args)[:200]}} -> {{repr(_got)[:200]}}, want "
              f"{{repr(_want)[:200]}}", file=_sys.stderr)
        _sys.exit(1)
"""


def plus_program(problem: dict[str, Any], solution: str) -> str:
    """The solution checked against the canonical one on EvalPlus's inputs
    (``base_input`` then ``plus_input``), outputs compared exactly, floats within ``atol``."""
    inputs = list(problem.get("base_input") or []) + list(problem.get("plus_input") or [])
    reference = str(problem["prompt"]) + str(problem["canonical_solution"])
    entry = str(problem["entry_point"])
    return (
        solution
        + "\n"
        + _PLUS_RUNNER.format(
            inputs=repr(json.dumps(inputs)),
            reference=repr(reference),
            entry=repr(entry),
            entry_name=entry,
            atol=float(problem.get("atol") or 0.0),
        )
    )
