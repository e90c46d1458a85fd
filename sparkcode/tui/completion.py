"""Completion for the prompt: slash commands, their arguments and ``@path`` mentions."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from .commands import COMMANDS

MAX_FILES = 20_000
"""Files indexed at most (a huge tree still completes, from the first ones found)."""
SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".venv",
        "venv",
        "node_modules",
        "__pycache__",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        ".tox",
        "dist",
        "build",
    }
)


class WorkspaceFiles:
    """The workspace's file paths (relative, ``/``-separated), listed lazily.

    Inside a git repository the list is ``git ls-files`` (tracked and untracked,
    ignored files excluded); elsewhere a directory walk that skips tool caches.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._files: list[str] | None = None

    def invalidate(self) -> None:
        """Forget the list (files may have changed); the next use lists again."""
        self._files = None

    @property
    def files(self) -> list[str]:
        if self._files is None:
            self._files = sorted(self._list())
        return self._files

    def _list(self) -> list[str]:
        try:
            out = subprocess.run(
                ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                cwd=self.root,
                capture_output=True,
                timeout=5,
                check=True,
            ).stdout
            return [p for p in out.decode("utf-8", "replace").split("\0") if p][:MAX_FILES]
        except (OSError, subprocess.SubprocessError):
            return self._walk()

    def _walk(self) -> list[str]:
        found: list[str] = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
            rel = Path(dirpath).relative_to(self.root)
            for name in sorted(filenames):
                found.append((rel / name).as_posix())
                if len(found) >= MAX_FILES:
                    return found
        return found

    def complete(self, partial: str) -> str | None:
        """The shortest path starting with ``partial`` (ties: alphabetical)."""
        matches = [p for p in self.files if p.startswith(partial) and p != partial]
        if not matches:
            return None
        return min(matches, key=lambda p: (len(p), p))


def _complete_word(word: str, choices: Sequence[str]) -> str | None:
    for choice in choices:
        if choice.startswith(word) and choice != word:
            return choice
    return None


def suggest_completion(value: str, files: WorkspaceFiles) -> str | None:
    """``value`` completed: a slash command, its argument, or the ``@path`` it ends
    with (after a space or a line break); None when nothing completes."""
    if not value:
        return None
    if value.startswith("/") and "\n" not in value:
        return _command(value)
    cut = max(value.rfind(" "), value.rfind("\n"))
    head, last = value[: cut + 1], value[cut + 1 :]
    if last.startswith("@") and len(last) > 1:
        path = files.complete(last[1:])
        if path is not None:
            return f"{head}@{path}"
    return None


def unique_command(value: str) -> str | None:
    """``value`` with the command name or choice it abbreviates filled in, when exactly
    one completes it (``/und`` -> ``/undo``, ``/effort hi`` -> ``/effort high``); else
    None. Enter runs that: the prompt shows the completion, and "unknown command /und"
    under a prompt that read "/undo" was the answer before. ``/c`` (clear, compact,
    context) stays unknown rather than clearing the conversation."""
    if not value.startswith("/") or "\n" in value:
        return None
    head, word, words = _command_words(value.strip())
    found = [w for w in words if w.startswith(word)]
    return head + found[0] if len(found) == 1 and found[0] != word else None


def _command_words(value: str) -> tuple[str, str, Sequence[str]]:
    """A slash command line as what precedes the word being typed, that word, and the
    words that may complete it: command names, or the command's choices (none for an
    unknown command or after a second argument)."""
    name, sep, arg = value.partition(" ")
    if not sep:
        return "/", name[1:], sorted(COMMANDS)
    command = COMMANDS.get(name[1:])
    choices = command.choices if command is not None and " " not in arg else ()
    return f"{name} ", arg, choices


def _command(value: str) -> str | None:
    head, word, words = _command_words(value)
    found = _complete_word(word, words)
    return None if found is None else head + found
