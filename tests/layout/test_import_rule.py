"""The import rule: ``sparkcode`` -> ``engine`` -> ``kernels``, never the reverse;
and no import circle inside ``sparkcode`` (:data:`KNOWN_CIRCLES` is empty).

Read from the source (every ``import`` statement, also inside functions and
under ``if TYPE_CHECKING:``, and ``importlib.import_module("...")`` with a
literal name), so a lazy import cannot hide a backwards edge or a circle.
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
                base = here[: len(here) - node.level + 1] if node.level > 1 else here
                found.append((node.lineno, base[0] if base else package))
            elif node.module:
                found.append((node.lineno, node.module.split(".")[0]))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
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
        "from .. import paths\n"
    )
    assert violations("engine", tmp_path) == [
        "engine/sub/mod.py:1 imports sparkcode",
        "engine/sub/mod.py:3 imports sparkcode",
        "engine/sub/mod.py:5 imports sparkcode",
    ]
    assert (6, "engine") in imported_packages(pkg / "mod.py", tmp_path)  # relative: its own


# -- import circles inside sparkcode/ ------------------------------------------------

KNOWN_CIRCLES: tuple[frozenset[str], ...] = ()
"""Circles left for later: none. The last one (the TUI's slash commands, main screen,
completion, queueing and prompt) was broken by giving the command handlers and the
queue a protocol of what they need from the screen; any circle now fails."""


def _module(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_graph(package: str, root: Path = ROOT) -> dict[str, set[str]]:
    """Each module of ``package`` -> the modules of ``package`` it imports, from every
    import statement (inside functions and ``if TYPE_CHECKING:`` too); ``from P
    import x`` names the module ``P.x`` when there is one, else ``P``."""
    modules = {_module(p, root): p for p in (root / package).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        targets: set[str] = set()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else []
                module = ".".join([*base, *([node.module] if node.module else [])])
                for alias in node.names:
                    sub = f"{module}.{alias.name}"
                    targets.add(sub if sub in modules else module)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(frozenset(group))
    return found


def test_no_import_circle_in_sparkcode() -> None:
    new = [
        sorted(c)
        for c in circles(module_graph("sparkcode"))
        if not any(c <= known for known in KNOWN_CIRCLES)
    ]
    assert new == []


def test_the_circle_finder_sees_lazy_and_type_checking_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "sparkcode"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from .a import A\n")
    (pkg / "sub" / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n"
    )
    (pkg / "sub" / "b.py").write_text("def f():\n    from sparkcode.sub import c\n")
    (pkg / "sub" / "c.py").write_text("from . import a\n")
    (pkg / "d.py").write_text("import sparkcode.sub.a\n")
    assert circles(module_graph("sparkcode", tmp_path)) == [
        frozenset({"sparkcode.sub.a", "sparkcode.sub.b", "sparkcode.sub.c"})
    ]
