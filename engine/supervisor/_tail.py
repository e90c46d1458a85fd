"""Finding and reading the end of a log file."""

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


def current_log(record_log: str | None, logs_dir: Path, pattern: str) -> Path | None:
    """The running process's log, else the newest one in ``logs_dir`` (the last run's)."""
    if record_log is not None:
        return Path(record_log)
    logs = sorted(logs_dir.glob(pattern), key=lambda p: p.stat().st_mtime)
    return logs[-1] if logs else None
