"""Files attached to the user's message as a turn starts (``[agent] attach_files``).

A small model spends most of a try finding what a larger one would read at once
(docs/experiments/2026-12-02-agent-suite.md). Aider adds the files a request names to the chat for
the same reason. With ``attach_files = N`` (bytes, 0 = off) the turn's message is
followed by:

- the whole project, when its text files (hidden ones and the tools' skipped
  directories aside) add up to at most N bytes: a small project is shown whole;
- otherwise the files the message names (a path relative to the workspace, or a
  file name that only one file has), in the order named, while they fit in N.

Files are shown as they are when the turn starts, without line numbers (a model
copies what it sees into ``old_string``; read_file's numbers there were a defect,
``_files.read_file_residue``). What was attached is said in a notice, so the user
sees the prompt grew and by how much.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..tools import walk_files

MAX_FILES = 200
"""Files looked at for the whole-project rule; a project with more is not small."""
_NAMED = re.compile(r"[\w./-]*\w\.\w+")
"""A word that can name a file: ``calc.py``, ``src/app/main.py``, ``test_calc.py``."""


@dataclass(frozen=True)
class Attachment:
    """What is appended to the turn's message, and what the notice says."""

    text: str
    paths: tuple[str, ...]
    whole_project: bool

    def describe(self) -> str:
        size = len(self.text.encode())
        which = "the whole project" if self.whole_project else "the files the message names"
        return (
            f"attached {which} to the prompt ({len(self.paths)} file"
            f"{'s' if len(self.paths) != 1 else ''}, {size:,} bytes): " + ", ".join(self.paths)
        )


def _text_of(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if b"\x00" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _project(workspace: Path) -> list[Path] | None:
    """The project's visible files, or None when there are more than MAX_FILES."""
    files: list[Path] = []
    for path in walk_files(workspace, workspace):
        relative = path.relative_to(workspace)
        if any(part.startswith(".") for part in relative.parts) or path.is_symlink():
            continue
        files.append(path)
        if len(files) > MAX_FILES:
            return None
    return files


def _named(message: str, workspace: Path, files: list[Path] | None) -> list[Path]:
    """Files the message names, in its order: relative paths first, then unique names."""
    by_name: dict[str, list[Path]] = {}
    for path in files or []:
        by_name.setdefault(path.name, []).append(path)
    found: list[Path] = []
    for word in _NAMED.findall(message):
        word = word.rstrip(".")
        candidate = (workspace / word).resolve()
        if candidate.is_file() and candidate.is_relative_to(workspace):
            path = candidate
        elif len(by_name.get(word, [])) == 1:
            path = by_name[word][0]
        else:
            continue
        if path not in found:
            found.append(path)
    return found


def _block(shown: str, text: str) -> str:
    fence = "```"
    while fence in text:
        fence += "`"
    body = text if text.endswith("\n") or not text else text + "\n"
    return f"{shown}\n{fence}\n{body}{fence}"


def attachment(message: str, workspace: Path, budget: int) -> Attachment | None:
    """What to append to ``message`` (None: nothing, or ``budget`` is 0)."""
    if budget <= 0:
        return None
    workspace = workspace.resolve()
    files = _project(workspace)
    texts: dict[Path, str] = {}
    whole = files is not None
    if files is not None:
        total = 0
        for path in files:
            text = _text_of(path)
            if text is None:
                continue
            texts[path] = text
            total += len(text.encode())
            if total > budget:
                whole = False
                break
    chosen: list[tuple[Path, str]] = []
    if whole and texts:
        named = _named(message, workspace, files)
        order = named + [p for p in texts if p not in named]
        chosen = [(p, texts[p]) for p in order]
    else:
        used = 0
        for path in _named(message, workspace, files):
            text = texts.get(path) or _text_of(path)
            if text is None or used + len(text.encode()) > budget:
                continue
            used += len(text.encode())
            chosen.append((path, text))
    if not chosen:
        return None
    shown = [path.relative_to(workspace).as_posix() for path, _ in chosen]
    head = (
        "The project's files as the task starts:"
        if whole
        else "The files named above, as the task starts:"
    )
    blocks = [_block(name, text) for name, (_, text) in zip(shown, chosen, strict=True)]
    return Attachment(
        text=head + "\n\n" + "\n\n".join(blocks), paths=tuple(shown), whole_project=whole
    )


__all__ = ["Attachment", "attachment"]
