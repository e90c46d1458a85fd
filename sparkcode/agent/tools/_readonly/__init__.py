"""The read-only rule: which shell commands may run without approval.

A command line is read-only when every command in it is one of the forms
below, audited against its manual: options that write files (``sort -o``,
``tree -o``, ``git diff --output``), run programs (``sort
--compress-program``, ``rg --pre``, sed's ``e``/``w`` commands, awk's
``system``), change the system (``date -s``) or follow symlinks out of the
tree are not in those forms, and every path argument, glob match and
path-valued option must resolve (symlinks followed) inside the workspace.
Anything the parser below does not fully understand (``$``, backquotes,
redirections other than to ``/dev/null``, subshells, background jobs, brace
expansion, ``VAR=value`` prefixes, a command given by path) is not read-only.
Being wrong here only costs an approval prompt, so every doubt asks.

:func:`check_read_only` returns ``None`` for a read-only command line and
otherwise the reason it is not, for the approval prompt and the tests.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from ._forms import FORMS, READ_ONLY_COMMANDS, READ_ONLY_GIT, check_find, check_git
from ._options import parse
from ._paths import Checker
from ._words import NotReadOnly, Word, split_commands

__all__ = [
    "READ_ONLY_COMMANDS",
    "READ_ONLY_GIT",
    "NotReadOnly",
    "check_read_only",
    "is_read_only_command",
    "split_commands",
]

_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\+?=")


def check_read_only(command: str, workspace: Path) -> str | None:
    """``None`` when ``command`` changes nothing and reads only inside
    ``workspace``; otherwise why it is not read-only."""
    checker = Checker(workspace)
    try:
        commands = split_commands(command)
        if not commands:
            raise NotReadOnly("an empty command")
        for words in commands:
            _check_command(words, checker)
    except NotReadOnly as exc:
        return str(exc)
    return None


def is_read_only_command(command: str, workspace: Path) -> bool:
    return check_read_only(command, workspace) is None


def _check_command(words: list[Word], checker: Checker) -> None:
    head = words[0]
    if _ASSIGNMENT.match(head.text):
        raise NotReadOnly(
            f"a variable assignment ({head.text.split('=')[0]}=...) can change "
            "what the command runs"
        )
    name = head.text
    if "/" in name or head.glob or head.tilde:
        raise NotReadOnly(f"{name!r} names a program by path")
    if name not in READ_ONLY_COMMANDS:
        raise NotReadOnly(f"{name!r} is not on the read-only list")
    found = shutil.which(name)
    if found is not None and Path(found).resolve().is_relative_to(checker.root):
        raise NotReadOnly(f"{name} resolves to {found}, inside the workspace")
    if name == "find":
        check_find(words[1:], checker)
    elif name == "git":
        check_git(words[1:], checker)
    else:
        parse(FORMS[name], name, words[1:], checker)
