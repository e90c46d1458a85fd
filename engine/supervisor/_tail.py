"""Reading the end of a log file."""

from __future__ import annotations

import os
from pathlib import Path


def tail_lines(path: Path, n: int) -> list[str]:
    """The last ``n`` lines of a file, reading only its end."""
    if n <= 0:
        return []
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            block = min(size, max(4096, n * 400))
            while True:
                fh.seek(size - block)
                data = fh.read(block)
                if data.count(b"\n") > n or block == size:
                    break
                block = min(size, block * 2)
    except OSError:
        return []
    return data.decode("utf-8", "replace").splitlines()[-n:]
