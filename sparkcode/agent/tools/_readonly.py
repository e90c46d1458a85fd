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

import glob
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

_SAFE_REDIRECT = re.compile(r"(?:2>&1|[12&]?>\s*/dev/null)(?=$|[\s|;&])")
_OPERATORS = ("&&", "||", "|", ";")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\+?=")
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
            word.text += command[i + 1:close]
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
                    raise NotReadOnly(f"'{d}' inside double quotes expands to text the rule "
                                      "cannot see")
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


# -- paths -------------------------------------------------------------------


@dataclass
class Checker:
    """Checks the words of one command against the workspace."""

    workspace: Path
    root: Path = field(init=False)

    def __post_init__(self) -> None:
        self.root = self.workspace.resolve()

    def path(self, text: str, *, what: str = "path", tilde: bool = False,
             globbed: bool = False) -> None:
        """``text`` (a path argument) must resolve inside the workspace."""
        if text in ("", "-"):
            return
        tilde = tilde or text.startswith("~")
        candidates = [text]
        if globbed:
            pattern = text if os.path.isabs(text) or tilde else str(self.root / text)
            if tilde:
                pattern = os.path.expanduser(pattern)
            matches = glob.glob(pattern)
            candidates = matches or [text]
        for cand in candidates:
            p = Path(os.path.expanduser(cand) if tilde else cand)
            if not p.is_absolute():
                p = self.root / p
            try:
                resolved = p.resolve()
            except (OSError, RuntimeError):
                raise NotReadOnly(f"the {what} {text!r} cannot be resolved") from None
            if resolved != self.root and not resolved.is_relative_to(self.root):
                raise NotReadOnly(f"the {what} {text!r} resolves to {resolved}, outside the "
                                  "workspace")

    def word_path(self, word: Word, what: str = "path") -> None:
        self.path(word.text, what=what, tilde=word.tilde, globbed=word.glob)


# -- command forms -----------------------------------------------------------


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


def _fs(*items: str) -> frozenset[str]:
    return frozenset(items)


def _canonical(opt: str, known: frozenset[str]) -> str:
    """GNU getopt and git accept any unambiguous prefix of a long option."""
    if opt in known:
        return opt
    matches = [k for k in known if k.startswith(opt)]
    return matches[0] if len(matches) == 1 else opt


def _parse(form: Form, name: str, words: list[Word], checker: Checker) -> None:
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
            operands.extend(words[i + 1:])
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
                    rest = t[j + 1:]
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


_FOLLOWS = "follows symlinks, which may lead outside the workspace"
_WHY = {
    "-o": "writes its output to a file", "--output": "writes its output to a file",
    "--compress-program": "runs a program",
    "sort -T": "writes temporary files into a directory",
    "--temporary-directory": "writes temporary files into a directory",
    "tree -R": "writes files into the directories it lists",
    "file -C": "compiles a magic file into the current directory",
    "--compile": "compiles a magic file into the current directory",
    "file -z": "runs decompression programs", "--uncompress": "runs decompression programs",
    "date -s": "sets the system clock", "--set": "sets the system clock",
    "--pre": "runs a program on every file",
    "rg -z": "runs decompression programs", "--search-zip": "runs decompression programs",
    "-L": _FOLLOWS, "-R": _FOLLOWS, "tree -l": _FOLLOWS, "--follow": _FOLLOWS,
    "--dereference": _FOLLOWS, "--dereference-recursive": _FOLLOWS, "--fromfile": "reads a "
    "listing from a file", "--fromtabfile": "reads a listing from a file",
    "diff -r": "follows symlinks in the directories it compares",
    "--recursive": "follows symlinks in the directories it compares",
    "sed -i": "edits files in place", "--in-place": "edits files in place",
    "sed -f": "reads its script from a file the rule cannot check",
    "--file": "reads its script from a file the rule cannot check",
    "printf -v": "assigns a shell variable",
    "git describe --dirty": "refreshes the index", "--broken": "refreshes the index",
}


def _why(name: str, opt: str) -> str:
    return _WHY.get(f"{name} {opt}") or _WHY.get(opt) or "is not in the read-only forms"


# sed: only scripts made of these commands, and `s` without the w/e flags.
_SED_SIMPLE = frozenset("pdqQnNPDlhHgGxz=F{}")
_SED_REFUSED = {"w": "writes a file", "W": "writes a file", "e": "runs a command",
                "r": "reads a file by name", "R": "reads a file by name"}


def _check_sed_script(script: str, _seen: list[str]) -> None:
    i, n = 0, len(script)

    def regex(delim: str) -> None:
        nonlocal i
        while i < n and script[i] != delim:
            i += 2 if script[i] == "\\" else 1
        if i >= n:
            raise NotReadOnly("sed: an unterminated regular expression")
        i += 1

    def address() -> None:
        nonlocal i
        if i < n and script[i] == "/":
            i += 1
            regex("/")
            while i < n and script[i] in "IM":
                i += 1
        elif i + 1 < n and script[i] == "\\":
            i += 2
            regex(script[i - 1])
        else:
            while i < n and (script[i].isdigit() or script[i] in "$~"):
                i += 1

    while True:
        while i < n and script[i] in " \t;":
            i += 1
        if i >= n:
            return
        address()
        if i < n and script[i] == ",":
            i += 1
            if i < n and script[i] in "+~":
                i += 1
            address()
        while i < n and script[i] in " \t!":
            i += 1
        if i >= n:
            raise NotReadOnly("sed: an address without a command")
        c = script[i]
        i += 1
        if c in _SED_SIMPLE:
            while c in "qQl" and i < n and script[i].isdigit():
                i += 1
            continue
        if c not in "sy":
            why = _SED_REFUSED.get(c, "is not in the read-only forms")
            raise NotReadOnly(f"sed: the {c!r} command {why}")
        if i >= n or script[i] in "\\ \t":
            raise NotReadOnly(f"sed: a {c} command without a delimiter")
        delim = script[i]
        i += 1
        regex(delim)
        regex(delim)
        while c == "s" and i < n and script[i] not in " \t;}":
            flag = script[i]
            if flag not in "gpiImM0123456789":
                why = {"w": "writes a file", "e": "runs the result as a command"}.get(
                    flag, "is not in the read-only forms")
                raise NotReadOnly(f"sed: the s flag {flag!r} {why}")
            i += 1


def _sed_extra(seen: list[str], operands: list[Word], values: dict[str, list[str]],
               checker: Checker) -> None:
    for script in values.get("-e", []) + values.get("--expression", []):
        _check_sed_script(script, seen)


def _check_awk_program(program: str, _seen: list[str]) -> None:
    text = program.replace("||", " ")
    for token, why in (("system", "calls system()"), ("getline", "reads with getline"),
                       ("|", "pipes to or from a command"),
                       (">", "redirects its output (writes a file)"),
                       ("@", "loads an extension or calls indirectly"),
                       ("ENVIRON", "reads the environment")):
        if token in text:
            raise NotReadOnly(f"awk: the program {why} ({token!r})")


def _no_pattern_check(_pattern: str, _seen: list[str]) -> None:
    """A grep pattern is only matched, never run or opened."""


def _git_branch_extra(seen: list[str], operands: list[Word], values: dict[str, list[str]],
                      checker: Checker) -> None:
    listing = {"--list", "-l", "--contains", "--no-contains", "--merged", "--no-merged",
               "--points-at"}
    if operands and not listing & set(seen):
        raise NotReadOnly("git branch NAME creates a branch")


def _date_extra(seen: list[str], operands: list[Word], values: dict[str, list[str]],
                checker: Checker) -> None:
    if any(not w.text.startswith("+") for w in operands):
        raise NotReadOnly("date with an operand that is not +FORMAT sets the clock")


def _diff_extra(seen: list[str], operands: list[Word], values: dict[str, list[str]],
                checker: Checker) -> None:
    for w in operands:
        if not w.glob and (checker.root / os.path.expanduser(w.text)).is_dir():
            raise NotReadOnly("diff on directories follows the symlinks inside them")


_GREP = Form(
    valued="efmABCdD", long_valued=_fs(
        "--regexp", "--max-count", "--after-context", "--before-context", "--context",
        "--label", "--include", "--exclude", "--exclude-dir", "--binary-files", "--devices",
        "--directories", "--group-separator", "--color", "--colour"),
    denied="R", long_denied=_fs("--dereference-recursive"),
    path_options=_fs("-f", "--file", "--exclude-from"),
    known_only=True, flags="EFGPivwxyclLoqsbHhnTZzUraI", long_flags=_fs(
        "--extended-regexp", "--fixed-strings", "--basic-regexp", "--perl-regexp",
        "--ignore-case", "--no-ignore-case", "--invert-match", "--word-regexp",
        "--line-regexp", "--count", "--files-with-matches", "--files-without-match",
        "--only-matching", "--quiet", "--silent", "--no-messages", "--byte-offset",
        "--with-filename", "--no-filename", "--line-number", "--initial-tab", "--null",
        "--null-data", "--text", "--recursive", "--line-buffered", "--no-group-separator",
        "--help", "--version"),
    first_operand=_no_pattern_check, pattern_options=_fs("-e", "-f", "--regexp", "--file"),
)

_RG = Form(
    valued="emABCgtTjMrE", long_valued=_fs(
        "--regexp", "--max-count", "--after-context", "--before-context", "--context",
        "--glob", "--iglob", "--type", "--type-not", "--threads", "--max-columns",
        "--replace", "--max-depth", "--sort", "--sortr", "--color", "--colors",
        "--max-filesize", "--encoding", "--type-add", "--context-separator",
        "--field-match-separator", "--path-separator"),
    denied="Lz", long_denied=_fs("--pre", "--follow", "--search-zip"),
    path_options=_fs("-f", "--file", "--ignore-file"),
    known_only=True, flags="iISsvwxclnNoqHuUFPa0bphy", long_flags=_fs(
        "--ignore-case", "--smart-case", "--case-sensitive", "--invert-match",
        "--word-regexp", "--line-regexp", "--count", "--count-matches",
        "--files-with-matches", "--files-without-match", "--line-number",
        "--no-line-number", "--only-matching", "--quiet", "--with-filename",
        "--no-filename", "--heading", "--no-heading", "--hidden", "--no-ignore",
        "--fixed-strings", "--multiline", "--files", "--json", "--vimgrep", "--column",
        "--trim", "--pretty", "--text", "--null", "--byte-offset", "--type-list",
        "--no-messages", "--stats", "--unrestricted", "--no-config", "--help", "--version",
        "--no-ignore-vcs", "--pcre2", "--crlf"),
    first_operand=_no_pattern_check, pattern_options=_fs("-e", "-f", "--regexp", "--file",
                                                         "--files", "--type-list"),
)

_SED = Form(
    valued="el", long_valued=_fs("--expression", "--line-length"),
    denied="if", long_denied=_fs("--in-place", "--file"),
    known_only=True, flags="nErsuz", long_flags=_fs(
        "--quiet", "--silent", "--regexp-extended", "--posix", "--separate", "--null-data",
        "--unbuffered", "--debug", "--help", "--version", "--sandbox"),
    first_operand=_check_sed_script, pattern_options=_fs("-e", "--expression"),
    extra=_sed_extra,
)

_AWK = Form(valued="Fv", long_valued=_fs("--field-separator", "--assign"), known_only=True,
            first_operand=_check_awk_program)

_FIND_DENIED = {
    "-exec": "runs a program", "-execdir": "runs a program", "-ok": "runs a program",
    "-okdir": "runs a program", "-delete": "deletes files", "-fprint": "writes a file",
    "-fprint0": "writes a file", "-fprintf": "writes a file", "-fls": "writes a file",
    "-L": _FOLLOWS, "-follow": _FOLLOWS,
}


def _check_find(words: list[Word], checker: Checker) -> None:
    for w in words:
        t = w.text
        if t in _FIND_DENIED:
            raise NotReadOnly(f"find {t} {_FIND_DENIED[t]}")
        if t.startswith(("-D", "-O")):
            raise NotReadOnly(f"find {t} is not in the read-only forms")
    # Every word that is not an expression keyword is checked as a path: start
    # points and reference files (-newer F) must be inside; a name pattern
    # like '*.py' resolves inside anyway.
    for w in words:
        if not w.text.startswith("-") and w.text not in ("(", ")", "!", ","):
            checker.path(w.text, what="find argument", tilde=w.tilde, globbed=w.glob)


# git: revisions and paths mix in the operands; every operand is checked as a
# path, which a revision (HEAD~2, main..topic, HEAD:src/x.py) passes.
_GIT_LOG_LIKE = Form(valued="O", long_denied=_fs("--output"), path_options=_fs("-O"))
_GIT_FORMS: dict[str, Form] = {
    "status": Form(),
    "diff": _GIT_LOG_LIKE,
    "log": _GIT_LOG_LIKE,
    "show": _GIT_LOG_LIKE,
    "shortlog": _GIT_LOG_LIKE,
    "blame": Form(valued="L", path_options=_fs("--contents", "--ignore-revs-file", "-S")),
    "ls-files": Form(long_valued=_fs("--exclude-per-directory"),
                     path_options=_fs("--exclude-from", "-X")),
    "rev-parse": Form(operands="text"),
    "branch": Form(
        long_valued=_fs("--sort", "--format", "--column"), known_only=True,
        flags="arvl", long_flags=_fs("--all", "--remotes", "--verbose", "--list",
                                     "--show-current", "--contains", "--no-contains",
                                     "--merged", "--no-merged", "--points-at", "--no-column",
                                     "--color", "--no-color", "--ignore-case", "--omit-empty"),
        operands="text", extra=_git_branch_extra),
    "describe": Form(long_denied=_fs("--dirty", "--broken"), operands="text"),
}
READ_ONLY_GIT = frozenset(_GIT_FORMS)


def _check_git(words: list[Word], checker: Checker) -> None:
    if words and words[0].text == "--no-pager":
        words = words[1:]
    if not words:
        raise NotReadOnly("git without a subcommand")
    sub = words[0].text
    if sub.startswith("-"):
        raise NotReadOnly(f"git option {sub} before the subcommand (it may set config or "
                          "paths)")
    if sub not in _GIT_FORMS:
        raise NotReadOnly(f"git {sub} is not a read-only subcommand")
    _parse(_GIT_FORMS[sub], f"git {sub}", words[1:], checker)


# Commands whose operands are all paths allow every option that is not denied.
_FORMS: dict[str, Form] = {
    "ls": Form(denied="L", long_denied=_fs("--dereference")),
    "cat": Form(),
    "nl": Form(),
    "head": Form(valued="nc", long_valued=_fs("--lines", "--bytes")),
    "tail": Form(valued="ncs", long_valued=_fs("--lines", "--bytes", "--sleep-interval",
                                                "--pid", "--max-unchanged-stats")),
    "wc": Form(path_options=_fs("--files0-from")),
    "stat": Form(valued="c", long_valued=_fs("--format", "--printf")),
    "file": Form(valued="eFP", long_valued=_fs("--exclude", "--separator", "--parameter"),
                 denied="Cz", long_denied=_fs("--compile", "--uncompress"),
                 path_options=_fs("-m", "--magic-file", "-f", "--files-from")),
    "du": Form(valued="Bdt", long_valued=_fs("--exclude", "--max-depth", "--block-size",
                                             "--threshold", "--time", "--time-style"),
               denied="L", long_denied=_fs("--dereference"),
               path_options=_fs("--files0-from", "--exclude-from", "-X")),
    "df": Form(valued="BtF", long_valued=_fs("--block-size", "--type", "--exclude-type")),
    "sort": Form(valued="ktSy", long_valued=_fs("--key", "--field-separator", "--buffer-size",
                                                "--parallel", "--batch-size", "--sort"),
                 denied="oT", long_denied=_fs("--output", "--compress-program",
                                              "--temporary-directory"),
                 path_options=_fs("--files0-from", "--random-source")),
    "uniq": Form(valued="fsw", long_valued=_fs("--skip-fields", "--skip-chars",
                                               "--check-chars", "--all-repeated", "--group"),
                 max_operands=1),
    "cut": Form(valued="bcdf", long_valued=_fs("--bytes", "--characters", "--delimiter",
                                               "--fields", "--output-delimiter")),
    "diff": Form(valued="CUFIxS", long_valued=_fs(
        "--label", "--ignore-matching-lines", "--unified", "--context",
        "--show-function-line", "--exclude", "--starting-file", "--line-format",
        "--horizon-lines", "--color", "--palette", "--tabsize", "--width"),
        denied="r", long_denied=_fs("--recursive"),
        path_options=_fs("--from-file", "--to-file", "--exclude-from", "-X"),
        extra=_diff_extra),
    "tree": Form(valued="LPI", long_valued=_fs("--filelimit", "--charset", "--timefmt",
                                               "--sort"),
                 denied="oRl", long_denied=_fs("--fromfile", "--fromtabfile", "--output")),
    "realpath": Form(path_options=_fs("--relative-to", "--relative-base")),
    "pwd": Form(operands="none"),
    "true": Form(operands="text"),
    "false": Form(operands="text"),
    "whoami": Form(operands="none"),
    "echo": Form(operands="text"),
    "printf": Form(operands="text", denied="v"),
    "basename": Form(valued="s", long_valued=_fs("--suffix"), operands="text"),
    "dirname": Form(operands="text"),
    "which": Form(operands="text"),
    "tr": Form(operands="text", max_operands=2),
    "date": Form(valued="dI", long_valued=_fs("--date", "--iso-8601", "--rfc-3339"),
                 denied="s", long_denied=_fs("--set"), operands="text",
                 path_options=_fs("-f", "--file", "-r", "--reference"), extra=_date_extra),
    "grep": _GREP,
    "rg": _RG,
    "sed": _SED,
    "awk": _AWK,
}
READ_ONLY_COMMANDS = frozenset({*_FORMS, "find", "git"})


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
        raise NotReadOnly(f"a variable assignment ({head.text.split('=')[0]}=...) can change "
                          "what the command runs")
    name = head.text
    if "/" in name or head.glob or head.tilde:
        raise NotReadOnly(f"{name!r} names a program by path")
    if name not in READ_ONLY_COMMANDS:
        raise NotReadOnly(f"{name!r} is not on the read-only list")
    found = shutil.which(name)
    if found is not None and Path(found).resolve().is_relative_to(checker.root):
        raise NotReadOnly(f"{name} resolves to {found}, inside the workspace")
    if name == "find":
        _check_find(words[1:], checker)
    elif name == "git":
        _check_git(words[1:], checker)
    else:
        _parse(_FORMS[name], name, words[1:], checker)
