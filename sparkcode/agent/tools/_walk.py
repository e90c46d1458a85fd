"""The project's files as the tools see them: VCS, virtualenv and cache
directories skipped, directory symlinks never followed."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "node_modules",
        ".venv",
        "venv",
        "__pycache__",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        ".tox",
    }
)


def walk_files(root: Path, base: Path) -> Iterator[Path]:
    """Files under ``base``, skipping VCS, virtualenv and cache directories,
    never following directory symlinks (they may point out of the workspace). A ``.git``
    file (a worktree's or a submodule's pointer to its git directory) is skipped too."""
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            if name != ".git":
                yield Path(dirpath) / name
