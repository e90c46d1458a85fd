"""The tests mirror the packages: a newcomer finds a module's tests where the module is.

``tests/sparkcode/<pkg>/`` and ``tests/engine/<pkg>/`` hold the tests of each package of
code, ``tests/kernels/`` those of ``kernels/``, ``tests/e2e/`` every module that boots a
real vLLM engine (and only those), ``tests/support/`` the helpers they share and
``tests/layout/`` these rules. Nothing else sits at the top of ``tests/``.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import ROOT

TESTS = ROOT / "tests"
TOP = {"sparkcode", "engine", "kernels", "e2e", "layout", "support"}
BOOTERS = {"run_engine", "shared_engine"}
"""The helpers of ``tests/support/engine.py`` that boot vLLM."""


def _code_packages(top: str) -> list[Path]:
    """Direct subpackages of ``top`` that hold code (not a data-only package)."""
    out = []
    for init in sorted((ROOT / top).glob("*/__init__.py")):
        pkg = init.parent
        if any(p.name != "__init__.py" for p in pkg.glob("*.py")) or any(
            (sub / "__init__.py").is_file() for sub in pkg.iterdir() if sub.is_dir()
        ):
            out.append(pkg)
    return out


def _test_files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("test_*.py"))


def test_every_package_with_code_has_its_test_folder() -> None:
    missing = []
    for top in ("sparkcode", "engine"):
        for pkg in _code_packages(top):
            folder = TESTS / pkg.relative_to(ROOT)
            if not _test_files(folder):
                missing.append(f"{pkg.relative_to(ROOT)} -> tests/{pkg.relative_to(ROOT)}/")
    assert _test_files(TESTS / "kernels"), "kernels/ has no tests/kernels/"
    assert missing == [], "packages without a test folder:\n" + "\n".join(missing)


def test_every_test_folder_mirrors_a_package() -> None:
    """A folder under tests/sparkcode or tests/engine names a real package (or the
    data/snapshot folders of its tests)."""
    stray = []
    for top in ("sparkcode", "engine"):
        for folder in sorted(p for p in (TESTS / top).rglob("*") if p.is_dir()):
            rel = folder.relative_to(TESTS)
            if any(part.startswith("__") or part == "data" for part in rel.parts):
                continue
            if not (ROOT / rel / "__init__.py").is_file():
                stray.append(str(rel))
    assert stray == [], f"test folders that mirror no package: {stray}"


def test_nothing_else_at_the_top_of_tests() -> None:
    names = {
        p.name
        for p in TESTS.iterdir()
        if p.name not in ("__init__.py", "conftest.py", "__pycache__")
    }
    assert names <= TOP, f"unexpected in tests/: {sorted(names - TOP)}"


def _marked_engine(tree: ast.Module) -> bool:
    """The module sets ``pytestmark = pytest.mark.engine`` (alone or in a list)."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            return "mark.engine" in ast.unparse(node.value)
    return False


def test_the_modules_that_boot_vllm_are_the_e2e_ones() -> None:
    """Every module marked ``engine`` (it boots vLLM) is in tests/e2e/, every module there
    is marked, and no module elsewhere starts an engine with the shared helpers."""
    misplaced, unmarked = [], []
    for path in _test_files(TESTS):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        in_e2e = path.parent == TESTS / "e2e"
        marked = _marked_engine(tree)
        boots = any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in BOOTERS
            for n in ast.walk(tree)
        )
        if (marked or boots) and not in_e2e:
            misplaced.append(str(path.relative_to(TESTS)))
        if in_e2e and not marked:
            unmarked.append(str(path.relative_to(TESTS)))
    assert misplaced == [], f"boot vLLM outside tests/e2e/: {misplaced}"
    assert unmarked == [], f"in tests/e2e/ without pytest.mark.engine: {unmarked}"
