"""Project instructions: ``AGENTS.md`` (or ``CLAUDE.md``) files, read once per session.

Looked for in the workspace and each parent directory up to the repository
root (the nearest directory holding ``.git``; without one, the workspace
only). In each directory ``AGENTS.md`` wins and ``CLAUDE.md`` is read only when
there is no ``AGENTS.md``. They go into the system prompt farthest first,
nearest last (the most specific word comes last), once, at session start, so
the prompt prefix stays byte-stable for the rest of the session and the
engine's prefix cache keeps hitting. Together they are capped at
:data:`MAX_BYTES`; the nearest files keep their room, and what is cut or left
out is said in :attr:`Instructions.notes`. A file that is not UTF-8 is left
out with a note naming it.
"""

from __future__ import annotations

import codecs
import os
from dataclasses import dataclass
from pathlib import Path

FILE_NAMES: tuple[str, ...] = ("AGENTS.md", "CLAUDE.md")
MAX_BYTES = 32 * 1024
"""All instruction files together, in UTF-8 bytes (about 8k tokens)."""
HEADING = "# Project instructions"


@dataclass(frozen=True)
class InstructionFile:
    """One loaded file."""

    path: Path
    shown: str
    """The path as the user sees it, relative to the workspace (``AGENTS.md``, ``../AGENTS.md``)."""
    text: str
    size: int
    """The file's size in bytes."""
    cut: bool = False
    """Only the start of the file fitted under the cap."""


@dataclass(frozen=True)
class Instructions:
    """What was loaded for one session, and what was not (``notes``)."""

    files: tuple[InstructionFile, ...] = ()
    notes: tuple[str, ...] = ()

    def system_prompt(self, base: str) -> str:
        """``base`` with the instruction files appended (``base`` itself when none)."""
        if not self.files:
            return base
        parts = [
            base,
            "",
            HEADING,
            "",
            "The project's instruction files follow, the nearest directory's last; follow them.",
        ]
        for f in self.files:
            parts += ["", f"## {f.shown}", "", f.text.rstrip("\n")]
        return "\n".join(parts)

    def summary(self) -> str:
        """One line for the TUI and ``sparkcode run``."""
        if not self.files:
            return "no project instructions (AGENTS.md) found"
        shown = ", ".join(f.shown + (" (cut)" if f.cut else "") for f in self.files)
        total = sum(len(f.text.encode()) for f in self.files)
        return f"project instructions: {shown} ({total} bytes in the system prompt)"


def repository_root(workspace: Path) -> Path | None:
    """The nearest directory at or above ``workspace`` holding ``.git``."""
    for directory in (workspace, *workspace.parents):
        if (directory / ".git").exists():
            return directory
    return None


def candidate_dirs(workspace: Path) -> list[Path]:
    """Where instruction files are looked for, farthest first."""
    workspace = workspace.resolve()
    root = repository_root(workspace)
    if root is None:
        return [workspace]
    dirs = [workspace]
    directory = workspace
    while directory != root:
        directory = directory.parent
        dirs.append(directory)
    return dirs[::-1]


def load_instructions(workspace: Path, *, max_bytes: int = MAX_BYTES) -> Instructions:
    """Find and read the instruction files for ``workspace``."""
    workspace = workspace.resolve()
    found: list[tuple[Path, str]] = []
    for directory in candidate_dirs(workspace):
        for name in FILE_NAMES:
            path = directory / name
            if path.is_file():
                found.append((path, _shown(path, workspace)))
                break
    notes: list[str] = []
    loaded: list[InstructionFile] = []
    room = max_bytes
    for path, shown in reversed(found):  # the nearest first: it keeps its room
        if room <= 0:
            notes.append(
                f"{shown} was not loaded: the instruction files passed the "
                f"{max_bytes // 1024} KiB cap"
            )
            continue
        try:
            size = path.stat().st_size
            with path.open("rb") as fh:
                data = fh.read(room + 1)
        except OSError as exc:
            notes.append(f"{shown} could not be read ({exc.strerror}); not loaded")
            continue
        cut = len(data) > room
        data = data[:room]
        try:
            text = codecs.getincrementaldecoder("utf-8")().decode(data, final=not cut)
        except UnicodeDecodeError as exc:
            notes.append(
                f"{shown} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                f"{exc.start}); not loaded: save it as UTF-8"
            )
            continue
        if cut:
            text = text[: text.rfind("\n") + 1] or text  # end on a whole line when possible
            notes.append(
                f"{shown} is {size} bytes; only its first {len(text.encode())} "
                f"were loaded (the instruction files are capped at "
                f"{max_bytes // 1024} KiB together)"
            )
            text += f"\n[... the rest of {shown} was cut: over the size cap]\n"
        room -= len(data)
        loaded.append(InstructionFile(path, shown, text, size, cut))
    return Instructions(tuple(reversed(loaded)), tuple(notes))


def _shown(path: Path, workspace: Path) -> str:
    return os.path.relpath(path, workspace)


__all__ = [
    "FILE_NAMES",
    "MAX_BYTES",
    "InstructionFile",
    "Instructions",
    "candidate_dirs",
    "load_instructions",
    "repository_root",
]
