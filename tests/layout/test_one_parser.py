"""Every parse of Python source in the app goes through ``sparkcode._pyparse``.

CI's Python (3.11.7) can raise ``SystemError: AST constructor recursion depth
mismatch`` when two threads call ``ast.parse`` at once (CPython gh-106905);
``bench humaneval --workers 4`` failed that way. The lock only helps if nothing
calls ``ast.parse`` or ``ast.literal_eval`` beside it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_GUARDED = {"parse", "literal_eval"}


def unguarded(root: Path) -> list[str]:
    """``path:line`` of every ``ast.parse``/``ast.literal_eval`` call under
    ``root/sparkcode`` outside ``_pyparse.py``."""
    found: list[str] = []
    for path in sorted((root / "sparkcode").rglob("*.py")):
        if path.name == "_pyparse.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in _GUARDED
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "ast"
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
            if (
                isinstance(node, ast.ImportFrom)
                and node.module == "ast"
                and any(alias.name in _GUARDED for alias in node.names)
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_the_app_parses_python_only_under_the_lock() -> None:
    assert unguarded(ROOT) == []


def test_the_checker_finds_a_bare_parse(tmp_path: Path) -> None:
    (tmp_path / "sparkcode").mkdir()
    (tmp_path / "sparkcode" / "a.py").write_text("import ast\nast.parse('x')\n")
    (tmp_path / "sparkcode" / "b.py").write_text("from ast import literal_eval\n")
    (tmp_path / "sparkcode" / "_pyparse.py").write_text("import ast\nast.parse('x')\n")
    assert unguarded(tmp_path) == ["sparkcode/a.py:2", "sparkcode/b.py:1"]
