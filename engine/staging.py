"""Writing a model directory so that a half-written one is never served.

A model copy is large (the cpu-coder's bf16 conversion takes 3.4 GiB on disk, its W8A8
copy 2.2 GiB), so the writer says up front when the disk cannot hold it, and a disk that
fills up while writing is reported as that, naming the folder, rather than as a library's
traceback.
"""

from __future__ import annotations

import contextlib
import errno
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import UserError

if TYPE_CHECKING:
    import torch

GiB = 1 << 30

HEADROOM = 64 << 20
"""Bytes asked for beyond ``need``: tokenizer files, config, metadata (a few MB)."""


class DiskSpaceError(UserError):
    """The file system that is to hold a model copy has too little free space."""


def tensor_bytes(tensors: Mapping[str, torch.Tensor]) -> int:
    """Bytes ``tensors`` take in a safetensors file; tied ones (one storage) count once."""
    sizes = {(t.data_ptr(), t.numel()): t.numel() * t.element_size() for t in tensors.values()}
    return sum(sizes.values())


def require_free(directory: Path, need: int, what: str) -> None:
    """Refuse before writing ``need`` bytes (plus :data:`HEADROOM`) for ``what`` under
    ``directory`` if they won't fit.

    ``directory`` may not exist yet: its nearest existing parent is on the same disk.
    """
    probe = directory
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    need += HEADROOM
    if need > free:
        raise DiskSpaceError(
            f"not enough disk space in {directory} for {what}: it needs about "
            f"{need / GiB:.1f} GiB and {free / GiB:.1f} GiB are free; free some space there, "
            "or set SPARKCODE_HOME to a folder on a larger disk"
        )


@contextlib.contextmanager
def staged(target: Path, need: int = 0, what: str = "") -> Iterator[Path]:
    """A temporary sibling of ``target`` to write into: renamed to ``target`` (replacing
    it) when the block ends, deleted with what it holds when the block raises, so an
    interrupted conversion or build leaves the directory as it was.

    With ``need`` (bytes) the disk is checked first: the old ``target`` stays until the
    rename, so the whole copy must fit beside it.
    """
    if need:
        require_free(target.parent, need, what or target.name)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        yield staging
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if exc.errno == errno.ENOSPC:
            raise DiskSpaceError(
                f"the disk holding {target.parent} filled up while writing {target.name} "
                f"({exc.strerror}); the partial copy was removed and nothing there changed: "
                "free some space and run the command again"
            ) from exc
        raise
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
