"""A package's private modules (``pkg/_impl.py``, ``pkg/_sub/``) are imported only from
inside that package; everything else goes through the package's public ``__init__``.

Read from the source like the import rule (every ``import`` statement, also inside
functions and under ``if TYPE_CHECKING:``). Private *names* of a sibling module
(``from .w2_moe_tiles import _fp4_tile``) are a module's own business and not checked.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("sparkcode", "engine", "kernels")


def _module_parts(path: Path, root: Path) -> tuple[str, ...]:
    parts = path.relative_to(root).with_suffix("").parts
    return parts[:-1] if parts[-1] == "__init__" else parts


def _is_module(root: Path, parts: list[str]) -> bool:
    base = root.joinpath(*parts)
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _targets(path: Path, root: Path) -> list[tuple[int, list[str]]]:
    """(line, dotted parts) of every module an import statement names."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = list(_module_parts(path, root))
    if path.name != "__init__.py":
        here = here[:-1]
    found: list[tuple[int, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            module = [*base, *(node.module.split(".") if node.module else [])]
            found.append((node.lineno, module))
            found += [(node.lineno, [*module, alias.name]) for alias in node.names]
    return found


def violations(package: str, root: Path = ROOT) -> list[str]:
    out: set[str] = set()
    for path in sorted((root / package).rglob("*.py")):
        importer = list(_module_parts(path, root))
        inside = importer if path.name == "__init__.py" else importer[:-1]
        for line, parts in _targets(path, root):
            for i, part in enumerate(parts):
                if not (part.startswith("_") and not part.startswith("__")):
                    continue
                if not _is_module(root, parts[: i + 1]):
                    break  # a private name, not a module
                owner = parts[:i]
                if inside[: len(owner)] != owner:
                    out.add(
                        f"{path.relative_to(root)}:{line} imports "
                        f"{'.'.join(parts[: i + 1])} from outside {'.'.join(owner)}"
                    )
                break
    return sorted(out)


@pytest.mark.parametrize("package", PACKAGES)
def test_private_modules_are_imported_only_from_their_package(package: str) -> None:
    assert violations(package) == []


def test_the_checker_sees_imports_of_private_modules(tmp_path: Path) -> None:
    """Each way in is caught; the package's own modules, a private name and the
    public ``__init__`` are not."""
    agent = tmp_path / "sparkcode" / "agent"
    (agent / "tools").mkdir(parents=True)
    (tmp_path / "sparkcode" / "__init__.py").write_text("")
    (agent / "__init__.py").write_text("from ._calls import check\n")
    (agent / "_calls.py").write_text("from .tools._walk import walk\n_X = 1\n")
    (agent / "tools" / "__init__.py").write_text("from ._walk import walk\n")
    (agent / "tools" / "_walk.py").write_text("from .. import _calls\nfrom .._calls import _X\n")
    (tmp_path / "sparkcode" / "replay.py").write_text(
        "from sparkcode.agent._calls import check\n"
        "def f():\n    import sparkcode.agent.tools._walk\n"
        "from sparkcode.agent import check\n"
        "from .agent import _calls\n"
    )
    assert violations("sparkcode", tmp_path) == [
        "sparkcode/agent/_calls.py:1 imports sparkcode.agent.tools._walk from outside "
        "sparkcode.agent.tools",
        "sparkcode/replay.py:1 imports sparkcode.agent._calls from outside sparkcode.agent",
        "sparkcode/replay.py:3 imports sparkcode.agent.tools._walk from outside "
        "sparkcode.agent.tools",
        "sparkcode/replay.py:5 imports sparkcode.agent._calls from outside sparkcode.agent",
    ]
