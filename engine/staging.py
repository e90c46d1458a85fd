"""Writing a model directory so that a half-written one is never served."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def staged(target: Path) -> Iterator[Path]:
    """A temporary sibling of ``target`` to write into: renamed to ``target`` (replacing
    it) when the block ends, deleted with what it holds when the block raises, so an
    interrupted conversion or build leaves the directory as it was."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        yield staging
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
