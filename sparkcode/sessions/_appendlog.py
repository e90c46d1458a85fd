"""An append-only file whose appends cost a memory copy, not a system call.

Session recording writes one record per streamed chunk. A ``write()`` per
chunk costs several microseconds on a busy machine, more than the agent's
client spends parsing the chunk, so records are copied into a shared,
writable memory map of the file instead. The bytes are in the kernel's page
cache the moment the copy ends: a process killed with SIGKILL loses nothing
that was copied (the kernel writes the pages back), and the copy of the last
record is the most that can be cut short. :meth:`sync` (once per turn) makes
them durable against power loss too.

The file is grown a window at a time, with the window's blocks reserved up
front (``posix_fallocate``) so a full disk is an ``OSError`` here rather than a
SIGBUS later. Until :meth:`close` trims it, the file ends in zero bytes. The
writer holds an exclusive ``flock`` on the file while it is open, so
:func:`repair` can tell a live file from one whose writer died (the kernel drops
the lock with the process, SIGKILL included) and trims only the latter. Where a
file system cannot reserve blocks, every append falls back to one ``os.write``.
"""

from __future__ import annotations

import errno
import fcntl
import json
import mmap
import os
import sys
from pathlib import Path

WINDOW = 4 * 1024 * 1024
"""Bytes mapped (and reserved on disk) at a time."""

POPULATE_STEP = 256 * 1024
"""Bytes faulted in ahead of the end at a time."""

MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)
"""Linux 5.14+ (the constant is missing from Python's mmap before 3.13)."""

_FSYNC_COVERS_MAPS = sys.platform == "linux"
"""Linux's fsync writes back pages dirtied through a shared map too (its msync
is the same file sync again); elsewhere msync first."""


class AppendLog:
    """Append bytes to ``path`` (created; it must not exist)."""

    def __init__(self, path: Path, *, window: int = WINDOW) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        # Held until close (or death): repair() leaves a locked file alone. Blocking,
        # because a repair may hold it for the instant it looks at the new, empty file.
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        self._window = max(mmap.PAGESIZE, window - window % mmap.PAGESIZE)
        self._size = 0
        """Logical end of the file: bytes appended so far."""
        self._map: mmap.mmap | None = None
        self._map_start = 0
        self._map_end = 0
        self._ready_end = 0
        """File offset up to which the map's pages are faulted in writable."""
        self._populates = True
        self._mapped = hasattr(os, "posix_fallocate")

    @property
    def size(self) -> int:
        return self._size

    def _remap(self, need: int) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
            self._ready_end = 0
        start = self._size - self._size % mmap.PAGESIZE
        length = self._window
        while start + length < self._size + need:
            length += self._window
        try:
            os.posix_fallocate(self._fd, start, length)
            self._map = mmap.mmap(
                self._fd, length, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=start
            )
        except OSError as exc:
            if exc.errno in (95, 22):  # EOPNOTSUPP, EINVAL: no block reservation here
                self._mapped = False
                os.ftruncate(self._fd, self._size)
                return
            raise
        self._map_start, self._map_end = start, start + length
        self._ready_end = start
        self._populate(self._size + need)

    def _populate(self, end: int) -> None:
        """Fault pages in, writable, a step past ``end``: one call instead of a write
        fault per page at the first copy into each (the fault costs more than the
        copy). Only a step ahead, because a sync writes populated pages back, zeros
        and all."""
        assert self._map is not None
        ready = min(self._map_end, end - end % mmap.PAGESIZE + POPULATE_STEP)
        if self._populates:
            try:
                self._map.madvise(
                    MADV_POPULATE_WRITE, self._ready_end - self._map_start, ready - self._ready_end
                )
            except (OSError, ValueError):
                self._populates = False  # before Linux 5.14: pages fault in one by one
        self._ready_end = ready

    def append(self, data: bytes) -> None:
        """Append ``data``; raises OSError (e.g. disk full) and then stays unusable."""
        size = self._size
        end = size + len(data)
        if end <= self._ready_end:  # the hot path: one copy
            self._map[size - self._map_start : end - self._map_start] = data  # type: ignore[index]
            self._size = end
            return
        if self._map is not None and end <= self._map_end:
            self._populate(end)
            self._map[size - self._map_start : end - self._map_start] = data
            self._size = end
            return
        if self._mapped:
            self._remap(len(data))
            if self._map is not None:
                self._map[size - self._map_start : end - self._map_start] = data
                self._size = end
                return
        view = memoryview(data)
        while view:
            view = view[os.pwrite(self._fd, view, self._size) :]
            self._size = end - len(view)

    def sync(self) -> None:
        """Make everything appended so far durable."""
        if self._map is not None and not _FSYNC_COVERS_MAPS:
            self._map.flush()
        os.fsync(self._fd)

    def close(self) -> None:
        """Trim the reserved tail and close; safe to call twice."""
        if self._fd < 0:
            return
        fd, self._fd = self._fd, -1
        try:
            if self._map is not None:
                self._map.flush()
                self._map.close()
                self._map = None
                self._ready_end = 0
            os.ftruncate(fd, self._size)
            os.fsync(fd)
        finally:
            os.close(fd)


_TAIL_STEP = 64 * 1024


def repair(path: Path) -> bool:
    """Make the file of a dead writer plain JSONL again; True if it was changed.

    Trims the reserved zero bytes, and a last record cut short by the kill (it was
    never whole, and the loader would drop it). A last record that is whole but
    lacks its line break gets one; a file left with nothing is removed. A file
    whose writer still holds its lock, and
    any file that cannot be opened for writing, is left alone.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return False  # a live writer
            raise
        size = os.fstat(fd).st_size
        if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
            return False  # the common case: closed cleanly
        end = size
        while end > 0:
            block = os.pread(fd, min(_TAIL_STEP, end), end - min(_TAIL_STEP, end))
            kept = block.rstrip(b"\x00")
            if kept:
                end -= len(block) - len(kept)
                break
            end -= len(block)
        keep = end
        if end > 0:
            start = max(0, end - _TAIL_STEP)
            tail = os.pread(fd, end - start, start)
            while b"\n" not in tail and start > 0:  # a record longer than one step
                start = max(0, start - _TAIL_STEP)
                tail = os.pread(fd, end - start, start)
            cut = tail.rfind(b"\n") + 1
            fragment = tail[cut:]
            keep = start + cut
            if fragment and _whole_record(fragment):
                os.pwrite(fd, b"\n", end)
                keep = end + 1
        if keep == 0:
            # Killed before its header was whole: nothing was saved, and an empty
            # file would be no session at all.
            os.unlink(path)
            return True
        os.ftruncate(fd, keep)
        os.fsync(fd)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # also releases the lock


def _whole_record(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def repair_directory(directory: Path, suffix: str = ".jsonl") -> list[Path]:
    """:func:`repair` every session file in ``directory``; the ones changed."""
    try:
        files = sorted(directory.glob(f"*{suffix}"))
    except OSError:
        return []
    return [p for p in files if repair(p)]
