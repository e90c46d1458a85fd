"""Custom slash commands: a Markdown file per command, its text the prompt sent.

Claude Code's convention (also OpenCode's and Crush's): ``review.md`` in
``.sparkcode/commands/`` or ``.claude/commands/`` of the project, or
``commands/`` in the user's config dir, is the command ``/review``. Its body is
the prompt; ``$ARGUMENTS`` becomes what follows the command (``$1``..``$9``
single words of it); with neither in the body, the arguments are appended on
a line ``ARGUMENTS: ...``, as Claude Code does. Optional YAML front matter
gives the ``description`` shown in ``/help``, completion and the palette
(default: the body's first line) and ``argument-hint``. The project's folders
win over the user's; a name that a built-in command has, or that is not one
word of letters, digits, ``-`` and ``_``, is skipped with a note.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .agent.extensions.skills import split_front_matter

PROJECT_DIRS: tuple[str, ...] = (".sparkcode/commands", ".claude/commands")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
_POSITIONAL = re.compile(r"\$([1-9])")


@dataclass(frozen=True)
class CustomCommand:
    name: str
    description: str
    body: str
    path: Path
    argument_hint: str = ""

    @property
    def usage(self) -> str:
        return f"/{self.name}" + (f" {self.argument_hint}" if self.argument_hint else "")

    def expand(self, arguments: str) -> str:
        """The prompt for ``/name arguments``."""
        arguments = arguments.strip()
        words = arguments.split()
        text = self.body.replace("$ARGUMENTS", arguments)
        text = _POSITIONAL.sub(
            lambda m: words[int(m.group(1)) - 1] if int(m.group(1)) <= len(words) else "", text
        )
        if arguments and "$ARGUMENTS" not in self.body and not _POSITIONAL.search(self.body):
            text = f"{text.rstrip()}\n\nARGUMENTS: {arguments}"
        return text.strip()


@dataclass(frozen=True)
class CustomCommands:
    commands: tuple[CustomCommand, ...] = ()
    notes: tuple[str, ...] = ()

    def get(self, name: str) -> CustomCommand | None:
        return next((c for c in self.commands if c.name == name), None)

    def expand_line(self, line: str) -> str | None:
        """``/name args`` expanded, or None when ``line`` names no custom command."""
        if not line.startswith("/"):
            return None
        name, _, arguments = line[1:].partition(" ")
        found = self.get(name)
        return found.expand(arguments) if found is not None else None


def load_commands(
    workspace: Path, user_dir: Path | None, reserved: frozenset[str] = frozenset()
) -> CustomCommands:
    """The custom commands of ``workspace`` and ``user_dir``; ``reserved`` are the
    built-in command names they may not take."""
    roots = [workspace / d for d in PROJECT_DIRS] + ([user_dir] if user_dir else [])
    found: dict[str, CustomCommand] = {}
    notes: list[str] = []
    for root in roots:
        if not root.is_dir():
            continue
        for path in sorted(root.glob("*.md")):
            name = path.stem
            if not _NAME.fullmatch(name):
                notes.append(
                    f"custom command {path} skipped: its name must be letters, digits, '-' and '_'"
                )
            elif name in reserved:
                notes.append(f"custom command {path} skipped: /{name} is a built-in command")
            elif name not in found:
                command, note = _read(path, name)
                if note is not None:
                    notes.append(note)
                if command is not None:
                    found[name] = command
    return CustomCommands(tuple(sorted(found.values(), key=lambda c: c.name)), tuple(notes))


def _read(path: Path, name: str) -> tuple[CustomCommand | None, str | None]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"custom command {path} skipped: cannot read it ({exc})"
    meta: Any = {}
    split = split_front_matter(text)
    if split is not None:
        try:
            meta = yaml.safe_load(split[0]) or {}
        except yaml.YAMLError as exc:
            return None, f"custom command {path} skipped: its front matter is not YAML ({exc})"
        if not isinstance(meta, dict):
            return None, f"custom command {path} skipped: its front matter is not a mapping"
        text = split[1]
    if not text.strip():
        return None, f"custom command {path} skipped: it has no prompt text"
    description = meta.get("description")
    if not isinstance(description, str) or not description.strip():
        description = text.strip().splitlines()[0][:80]
    hint = meta.get("argument-hint", "")
    return CustomCommand(
        name=name,
        description=" ".join(description.split()),
        body=text,
        path=path,
        argument_hint=hint if isinstance(hint, str) else "",
    ), None


__all__ = ["PROJECT_DIRS", "CustomCommand", "CustomCommands", "load_commands"]
