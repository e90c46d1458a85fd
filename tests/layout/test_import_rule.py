"""The import rule: ``sparkcode`` -> ``engine`` -> ``kernels``, never the reverse.

Read from the source (every ``import`` statement, also inside functions, and
``importlib.import_module("...")`` with a literal name), so a lazy import
cannot hide a backwards edge.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN: dict[str, frozenset[str]] = {
    "engine": frozenset({"sparkcode"}),
    "kernels": frozenset({"engine", "sparkcode"}),
}


def imported_packages(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, top-level package) of every import in ``path``, relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    parts = path.relative_to(root).with_suffix("").parts
    package = parts[0]
    here = list(parts if parts[-1] == "__init__" else parts[:-1])
    found: list[tuple[int, str]] = []  # in ast.walk order, not line order
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[:len(here) - node.level + 1] if node.level > 1 else here
                found.append((node.lineno, base[0] if base else package))
            elif node.module:
                found.append((node.lineno, node.module.split(".")[0]))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.append((node.lineno, node.args[0].value.split(".")[0]))
    return found


def violations(package: str, root: Path = ROOT) -> list[str]:
    bad = FORBIDDEN[package]
    out = []
    for path in sorted((root / package).rglob("*.py")):
        for line, name in imported_packages(path, root):
            if name in bad:
                out.append(f"{path.relative_to(root)}:{line} imports {name}")
    return out


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_flow_one_way(package: str) -> None:
    assert violations(package) == []


def test_the_checker_sees_backward_imports(tmp_path: Path) -> None:
    """The checker itself: each way of importing backwards is caught, forwards is not."""
    pkg = tmp_path / "engine" / "sub"
    pkg.mkdir(parents=True)
    (tmp_path / "engine" / "__init__.py").write_text("from . import sub\nimport kernels\n")
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text(
        "import sparkcode.config\n"
        "def f():\n    from sparkcode.agent import Agent\n"
        "    import importlib\n    importlib.import_module('sparkcode.tui')\n"
        "from .. import paths\n")
    assert violations("engine", tmp_path) == [
        "engine/sub/mod.py:1 imports sparkcode", "engine/sub/mod.py:3 imports sparkcode",
        "engine/sub/mod.py:5 imports sparkcode"]
    assert (6, "engine") in imported_packages(pkg / "mod.py", tmp_path)  # relative: its own
