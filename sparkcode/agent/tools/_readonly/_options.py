"""The read-only rule's option parser: a command's words against its :class:`Form`.

Options are parsed GNU-style (clusters, attached values, unambiguous long-option
prefixes); a denied option, a value or operand naming a path outside the
workspace, or (for ``known_only`` forms) an unknown option raises
:class:`NotReadOnly` with the reason from :data:`_WHY`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ._paths import Checker
from ._words import NotReadOnly, Word

Extra = Callable[[list[str], list[Word], dict[str, list[str]], "Checker"], None]


@dataclass(frozen=True)
class Form:
    """The read-only form of one command.

    Options are parsed GNU-style: ``-abc`` clusters, ``-fVALUE``/``-f VALUE``
    for short options that take a value, ``--long=VALUE``/``--long VALUE``;
    ``--`` ends the options.
    """

    valued: str = ""
    """Short options that take a value."""
    long_valued: frozenset[str] = frozenset()
    denied: str = ""
    """Short options that write, execute or leave the workspace."""
    long_denied: frozenset[str] = frozenset()
    path_options: frozenset[str] = frozenset()
    """Options (``-f``, ``--file``) whose value is a path."""
    known_only: bool = False
    """Unknown options are refused (commands whose operands are not all paths)."""
    flags: str = ""
    long_flags: frozenset[str] = frozenset()
    operands: str = "paths"
    """``paths``, ``text`` (never touched as files), ``none``."""
    max_operands: int | None = None
    first_operand: Callable[[str, list[str]], None] | None = None
    """Checks the first operand (a script or pattern) when no option gave it;
    called with it and the options seen."""
    pattern_options: frozenset[str] = frozenset()
    """Options that supply the script/pattern (then every operand is a path)."""
    extra: Extra | None = None
    """A last check on the options seen, the operands and the option values."""


def fs(*items: str) -> frozenset[str]:
    return frozenset(items)


def _canonical(opt: str, known: frozenset[str]) -> str:
    """GNU getopt and git accept any unambiguous prefix of a long option."""
    if opt in known:
        return opt
    matches = [k for k in known if k.startswith(opt)]
    return matches[0] if len(matches) == 1 else opt


def parse(form: Form, name: str, words: list[Word], checker: Checker) -> None:
    seen: list[str] = []
    values: dict[str, list[str]] = {}
    operands: list[Word] = []
    short_valued = form.valued + "".join(o[1] for o in form.path_options if len(o) == 2)
    long_paths = frozenset(o for o in form.path_options if o.startswith("--"))
    long_valued = form.long_valued | long_paths
    long_known = long_valued | form.long_flags
    i = 0

    def value_of(opt: str, attached: str | None) -> str:
        nonlocal i
        if attached is not None:
            return attached
        if i + 1 >= len(words):
            raise NotReadOnly(f"{name}: {opt} needs a value")
        i += 1
        return words[i].text

    def took_value(opt: str, value: str) -> None:
        values.setdefault(opt, []).append(value)
        if opt in form.path_options:
            checker.path(value, what=f"{name} {opt} file")

    while i < len(words):
        w = words[i]
        t = w.text
        if t == "--":
            operands.extend(words[i + 1 :])
            break
        if t.startswith("--") and len(t) > 2:
            given, eq, val = t.partition("=")
            denied = [d for d in form.long_denied if d.startswith(given)]
            if denied:
                raise NotReadOnly(f"{name} {given} {_why(name, denied[0])}")
            opt = _canonical(given, long_known)
            seen.append(opt)
            if opt in long_valued:
                took_value(opt, value_of(opt, val if eq else None))
            elif form.known_only and opt not in form.long_flags:
                raise NotReadOnly(f"{name}: option {given} is not in the read-only forms")
        elif t.startswith("-") and len(t) > 1 and not _is_number(t, name):
            for j, letter in enumerate(t[1:], start=1):
                opt = "-" + letter
                if letter in form.denied:
                    raise NotReadOnly(f"{name} {opt} {_why(name, opt)}")
                seen.append(opt)
                if letter in short_valued:
                    rest = t[j + 1 :]
                    took_value(opt, value_of(opt, rest if rest else None))
                    break
                if form.known_only and letter not in form.flags:
                    raise NotReadOnly(f"{name}: option {opt} is not in the read-only forms")
        else:
            operands.append(w)
        i += 1
    if form.first_operand is not None and not (set(seen) & form.pattern_options):
        if not operands:
            raise NotReadOnly(f"{name}: no script or pattern")
        form.first_operand(operands[0].text, seen)
        operands = operands[1:]
    if form.max_operands is not None and len(operands) > form.max_operands:
        raise NotReadOnly(f"{name} with {len(operands)} operands (the last one may be written)")
    if form.operands == "none" and operands:
        raise NotReadOnly(f"{name} takes no operands in its read-only form")
    if form.operands == "paths":
        for w in operands:
            checker.word_path(w)
    if form.extra is not None:
        form.extra(seen, operands, values, checker)


def _is_number(text: str, name: str) -> bool:
    # `head -5`, `tail -20`: the old count syntax.
    return name in ("head", "tail") and text[1:].isdigit()


FOLLOWS = "follows symlinks, which may lead outside the workspace"
_WHY = {
    "-o": "writes its output to a file",
    "--output": "writes its output to a file",
    "--compress-program": "runs a program",
    "sort -T": "writes temporary files into a directory",
    "--temporary-directory": "writes temporary files into a directory",
    "tree -R": "writes files into the directories it lists",
    "file -C": "compiles a magic file into the current directory",
    "--compile": "compiles a magic file into the current directory",
    "file -z": "runs decompression programs",
    "--uncompress": "runs decompression programs",
    "date -s": "sets the system clock",
    "--set": "sets the system clock",
    "--pre": "runs a program on every file",
    "rg -z": "runs decompression programs",
    "--search-zip": "runs decompression programs",
    "-L": FOLLOWS,
    "-R": FOLLOWS,
    "tree -l": FOLLOWS,
    "--follow": FOLLOWS,
    "--dereference": FOLLOWS,
    "--dereference-recursive": FOLLOWS,
    "--fromfile": "reads a listing from a file",
    "--fromtabfile": "reads a listing from a file",
    "diff -r": "follows symlinks in the directories it compares",
    "--recursive": "follows symlinks in the directories it compares",
    "sed -i": "edits files in place",
    "--in-place": "edits files in place",
    "sed -f": "reads its script from a file the rule cannot check",
    "--file": "reads its script from a file the rule cannot check",
    "printf -v": "assigns a shell variable",
    "git describe --dirty": "refreshes the index",
    "--broken": "refreshes the index",
}


def _why(name: str, opt: str) -> str:
    return _WHY.get(f"{name} {opt}") or _WHY.get(opt) or "is not in the read-only forms"
