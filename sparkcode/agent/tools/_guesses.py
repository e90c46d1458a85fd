"""Paths a small model guesses: a file named under a directory that is not there,
while a file of that name sits at the top of the project.

Qwen2.5-Coder-1.5B wrote ``workspace/calc.py`` for calc.py (the system prompt then
called the project "the workspace"), ``src/inventory.py`` for inventory.py and
``tests/test_shop.py`` for test_shop.py, in 5 of 24 tries of the agent suite
(2026-12-02, docs/agent.md), and spent the try on the error. The guess is
recognised only when the path's first directory does not exist and the top of the
project has a file of the same name: a project with a ``src/`` is never second-guessed.

Reading or editing such a path works on the file at the top, and the result says so;
writing a new file there is refused (``refuse_a_guessed_directory``): the write would
leave the real file as it was and put the change where nothing imports it.
"""

from __future__ import annotations

from pathlib import Path

from ._base import ToolError


def top_level_twin(workspace: Path, path: Path) -> Path | None:
    """The file at the top of ``workspace`` that ``path`` (missing) was a guess for."""
    if path.exists():
        return None
    try:
        parts = path.relative_to(workspace).parts
    except ValueError:
        return None
    if len(parts) < 2 or (workspace / parts[0]).exists():
        return None
    twin = workspace / path.name
    return twin if twin.is_file() else None


def instead_of_a_guess(workspace: Path, path: Path) -> tuple[Path, str]:
    """``path``, or the top-level file it guessed at and a note saying so."""
    twin = top_level_twin(workspace, path)
    if twin is None:
        return path, ""
    top = path.relative_to(workspace).parts[0]
    return twin, (
        f"; there is no {top}/ directory, so this is {twin.name} at the top of the project"
    )


def refuse_a_guessed_directory(workspace: Path, path: Path, shown: str) -> None:
    """A new file under a missing directory, named like a file at the top: refused.
    Creating the directory first (bash mkdir) says it is meant."""
    if top_level_twin(workspace, path) is None:
        return
    top = path.relative_to(workspace).parts[0]
    raise ToolError(
        f"{shown} was not written: there is no {top}/ directory, and "
        f"{path.name} is already at the top of the project. Paths are "
        f"relative to the project's top directory: to change that file, use "
        f"{path.name!r}; to create a new {top}/ directory, make it first"
    )


__all__ = ["instead_of_a_guess", "refuse_a_guessed_directory", "top_level_twin"]
