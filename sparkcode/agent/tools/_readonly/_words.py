"""The read-only rule's tokenizer: a command line as simple commands of plain words.

Only words, quotes and ``|``, ``||``, ``&&``, ``;`` (and redirections to
``/dev/null``) are understood; anything else raises :class:`NotReadOnly`, since a
construct the rule does not parse cannot be judged read-only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SAFE_REDIRECT = re.compile(r"(?:2>&1|[12&]?>\s*/dev/null)(?=$|[\s|;&])")
_OPERATORS = ("&&", "||", "|", ";")
_GLOB_CHARS = frozenset("*?[")


class NotReadOnly(Exception):
    """Why a command line is not read-only (its message is the reason)."""


@dataclass
class Word:
    text: str
    glob: bool = False
    """An unquoted ``*``, ``?`` or ``[``: bash expands it to matching paths."""
    tilde: bool = False
    """Starts with an unquoted ``~``: bash expands it to a home directory."""


# -- tokenizer ---------------------------------------------------------------


def split_commands(command: str) -> list[list[Word]]:
    """The simple commands of a command line (split at ``|``, ``||``, ``&&``,
    ``;``), each as its words, with quoting removed. Raises NotReadOnly on
    anything that is not plain words and those operators."""
    for bad in ("\n", "\r", "\x00"):
        if bad in command:
            raise NotReadOnly("the command spans several lines")
    commands: list[list[Word]] = [[]]
    i, n = 0, len(command)
    word: Word | None = None

    def end_word() -> None:
        nonlocal word
        if word is not None:
            commands[-1].append(word)
            word = None

    while i < n:
        c = command[i]
        if c in " \t":
            end_word()
            i += 1
            continue
        redirect = _redirect_at(command, i, word is None)
        if redirect:
            end_word()
            i += len(redirect)
            continue
        op = next((o for o in _OPERATORS if command.startswith(o, i)), None)
        if op is not None:
            end_word()
            if not commands[-1]:
                raise NotReadOnly(f"'{op}' without a command before it")
            commands.append([])
            i += len(op)
            continue
        if c == "#" and word is None:
            raise NotReadOnly("a comment ('#') hides the rest of the line")
        if c in "$`":
            raise NotReadOnly(f"'{c}' expands to text the rule cannot see")
        if c in "<>":
            raise NotReadOnly("a redirection other than to /dev/null")
        if c in "()&":
            raise NotReadOnly(f"'{c}' (subshell, process substitution or background job)")
        if c in "{}":
            raise NotReadOnly("brace expansion")
        if word is None:
            word = Word("", tilde=(c == "~"))
        if c == "'":
            close = command.find("'", i + 1)
            if close < 0:
                raise NotReadOnly("an unterminated quote")
            word.text += command[i + 1 : close]
            i = close + 1
        elif c == '"':
            i += 1
            while True:
                if i >= n:
                    raise NotReadOnly("an unterminated quote")
                d = command[i]
                if d == '"':
                    i += 1
                    break
                if d in "$`":
                    raise NotReadOnly(
                        f"'{d}' inside double quotes expands to text the rule cannot see"
                    )
                if d == "\\" and i + 1 < n and command[i + 1] in '"\\':
                    word.text += command[i + 1]
                    i += 2
                    continue
                word.text += d
                i += 1
        elif c == "\\":
            if i + 1 >= n:
                raise NotReadOnly("a trailing backslash")
            word.text += command[i + 1]
            i += 2
        else:
            if c in _GLOB_CHARS:
                word.glob = True
            word.text += c
            i += 1
    end_word()
    if not commands[-1]:
        if len(commands) > 1:
            raise NotReadOnly("an operator without a command after it")
        commands.pop()
    return commands


def _redirect_at(command: str, i: int, at_word_start: bool) -> str | None:
    if not at_word_start:
        return None
    m = _SAFE_REDIRECT.match(command, i)
    return m.group(0) if m else None
