"""The read-only forms: which commands, with which options, may run without approval.

Each command's form was audited against its manual; sed and awk programs and
find expressions get their own checks because their scripts can write files or
run programs.
"""

from __future__ import annotations

import os

from ._options import FOLLOWS, Form, fs, parse
from ._paths import Checker
from ._words import NotReadOnly, Word

# sed: only scripts made of these commands, and `s` without the w/e flags.
_SED_SIMPLE = frozenset("pdqQnNPDlhHgGxz=F{}")
_SED_REFUSED = {
    "w": "writes a file",
    "W": "writes a file",
    "e": "runs a command",
    "r": "reads a file by name",
    "R": "reads a file by name",
}


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
                    flag, "is not in the read-only forms"
                )
                raise NotReadOnly(f"sed: the s flag {flag!r} {why}")
            i += 1


def _sed_extra(
    seen: list[str], operands: list[Word], values: dict[str, list[str]], checker: Checker
) -> None:
    for script in values.get("-e", []) + values.get("--expression", []):
        _check_sed_script(script, seen)


def _check_awk_program(program: str, _seen: list[str]) -> None:
    text = program.replace("||", " ")
    for token, why in (
        ("system", "calls system()"),
        ("getline", "reads with getline"),
        ("|", "pipes to or from a command"),
        (">", "redirects its output (writes a file)"),
        ("@", "loads an extension or calls indirectly"),
        ("ENVIRON", "reads the environment"),
    ):
        if token in text:
            raise NotReadOnly(f"awk: the program {why} ({token!r})")


def _no_pattern_check(_pattern: str, _seen: list[str]) -> None:
    """A grep pattern is only matched, never run or opened."""


def _git_branch_extra(
    seen: list[str], operands: list[Word], values: dict[str, list[str]], checker: Checker
) -> None:
    listing = {
        "--list",
        "-l",
        "--contains",
        "--no-contains",
        "--merged",
        "--no-merged",
        "--points-at",
    }
    if operands and not listing & set(seen):
        raise NotReadOnly("git branch NAME creates a branch")


def _date_extra(
    seen: list[str], operands: list[Word], values: dict[str, list[str]], checker: Checker
) -> None:
    if any(not w.text.startswith("+") for w in operands):
        raise NotReadOnly("date with an operand that is not +FORMAT sets the clock")


def _diff_extra(
    seen: list[str], operands: list[Word], values: dict[str, list[str]], checker: Checker
) -> None:
    for w in operands:
        if not w.glob and (checker.root / os.path.expanduser(w.text)).is_dir():
            raise NotReadOnly("diff on directories follows the symlinks inside them")


_GREP = Form(
    valued="efmABCdD",
    long_valued=fs(
        "--regexp",
        "--max-count",
        "--after-context",
        "--before-context",
        "--context",
        "--label",
        "--include",
        "--exclude",
        "--exclude-dir",
        "--binary-files",
        "--devices",
        "--directories",
        "--group-separator",
        "--color",
        "--colour",
    ),
    denied="R",
    long_denied=fs("--dereference-recursive"),
    path_options=fs("-f", "--file", "--exclude-from"),
    known_only=True,
    flags="EFGPivwxyclLoqsbHhnTZzUraI",
    long_flags=fs(
        "--extended-regexp",
        "--fixed-strings",
        "--basic-regexp",
        "--perl-regexp",
        "--ignore-case",
        "--no-ignore-case",
        "--invert-match",
        "--word-regexp",
        "--line-regexp",
        "--count",
        "--files-with-matches",
        "--files-without-match",
        "--only-matching",
        "--quiet",
        "--silent",
        "--no-messages",
        "--byte-offset",
        "--with-filename",
        "--no-filename",
        "--line-number",
        "--initial-tab",
        "--null",
        "--null-data",
        "--text",
        "--recursive",
        "--line-buffered",
        "--no-group-separator",
        "--help",
        "--version",
    ),
    first_operand=_no_pattern_check,
    pattern_options=fs("-e", "-f", "--regexp", "--file"),
)

_RG = Form(
    valued="emABCgtTjMrE",
    long_valued=fs(
        "--regexp",
        "--max-count",
        "--after-context",
        "--before-context",
        "--context",
        "--glob",
        "--iglob",
        "--type",
        "--type-not",
        "--threads",
        "--max-columns",
        "--replace",
        "--max-depth",
        "--sort",
        "--sortr",
        "--color",
        "--colors",
        "--max-filesize",
        "--encoding",
        "--type-add",
        "--context-separator",
        "--field-match-separator",
        "--path-separator",
    ),
    denied="Lz",
    long_denied=fs("--pre", "--follow", "--search-zip"),
    path_options=fs("-f", "--file", "--ignore-file"),
    known_only=True,
    flags="iISsvwxclnNoqHuUFPa0bphy",
    long_flags=fs(
        "--ignore-case",
        "--smart-case",
        "--case-sensitive",
        "--invert-match",
        "--word-regexp",
        "--line-regexp",
        "--count",
        "--count-matches",
        "--files-with-matches",
        "--files-without-match",
        "--line-number",
        "--no-line-number",
        "--only-matching",
        "--quiet",
        "--with-filename",
        "--no-filename",
        "--heading",
        "--no-heading",
        "--hidden",
        "--no-ignore",
        "--fixed-strings",
        "--multiline",
        "--files",
        "--json",
        "--vimgrep",
        "--column",
        "--trim",
        "--pretty",
        "--text",
        "--null",
        "--byte-offset",
        "--type-list",
        "--no-messages",
        "--stats",
        "--unrestricted",
        "--no-config",
        "--help",
        "--version",
        "--no-ignore-vcs",
        "--pcre2",
        "--crlf",
    ),
    first_operand=_no_pattern_check,
    pattern_options=fs("-e", "-f", "--regexp", "--file", "--files", "--type-list"),
)

_SED = Form(
    valued="el",
    long_valued=fs("--expression", "--line-length"),
    denied="if",
    long_denied=fs("--in-place", "--file"),
    known_only=True,
    flags="nErsuz",
    long_flags=fs(
        "--quiet",
        "--silent",
        "--regexp-extended",
        "--posix",
        "--separate",
        "--null-data",
        "--unbuffered",
        "--debug",
        "--help",
        "--version",
        "--sandbox",
    ),
    first_operand=_check_sed_script,
    pattern_options=fs("-e", "--expression"),
    extra=_sed_extra,
)

_AWK = Form(
    valued="Fv",
    long_valued=fs("--field-separator", "--assign"),
    known_only=True,
    first_operand=_check_awk_program,
)

_FIND_DENIED = {
    "-exec": "runs a program",
    "-execdir": "runs a program",
    "-ok": "runs a program",
    "-okdir": "runs a program",
    "-delete": "deletes files",
    "-fprint": "writes a file",
    "-fprint0": "writes a file",
    "-fprintf": "writes a file",
    "-fls": "writes a file",
    "-L": FOLLOWS,
    "-follow": FOLLOWS,
}


def check_find(words: list[Word], checker: Checker) -> None:
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
_GIT_LOG_LIKE = Form(valued="O", long_denied=fs("--output"), path_options=fs("-O"))
_GIT_FORMS: dict[str, Form] = {
    "status": Form(),
    "diff": _GIT_LOG_LIKE,
    "log": _GIT_LOG_LIKE,
    "show": _GIT_LOG_LIKE,
    "shortlog": _GIT_LOG_LIKE,
    "blame": Form(valued="L", path_options=fs("--contents", "--ignore-revs-file", "-S")),
    "ls-files": Form(
        long_valued=fs("--exclude-per-directory"), path_options=fs("--exclude-from", "-X")
    ),
    "rev-parse": Form(operands="text"),
    "branch": Form(
        long_valued=fs("--sort", "--format", "--column"),
        known_only=True,
        flags="arvl",
        long_flags=fs(
            "--all",
            "--remotes",
            "--verbose",
            "--list",
            "--show-current",
            "--contains",
            "--no-contains",
            "--merged",
            "--no-merged",
            "--points-at",
            "--no-column",
            "--color",
            "--no-color",
            "--ignore-case",
            "--omit-empty",
        ),
        operands="text",
        extra=_git_branch_extra,
    ),
    "describe": Form(long_denied=fs("--dirty", "--broken"), operands="text"),
}
READ_ONLY_GIT = frozenset(_GIT_FORMS)


def check_git(words: list[Word], checker: Checker) -> None:
    if words and words[0].text == "--no-pager":
        words = words[1:]
    if not words:
        raise NotReadOnly("git without a subcommand")
    sub = words[0].text
    if sub.startswith("-"):
        raise NotReadOnly(f"git option {sub} before the subcommand (it may set config or paths)")
    if sub not in _GIT_FORMS:
        raise NotReadOnly(f"git {sub} is not a read-only subcommand")
    parse(_GIT_FORMS[sub], f"git {sub}", words[1:], checker)


# Commands whose operands are all paths allow every option that is not denied.
FORMS: dict[str, Form] = {
    "ls": Form(denied="L", long_denied=fs("--dereference")),
    "cat": Form(),
    "nl": Form(),
    "head": Form(valued="nc", long_valued=fs("--lines", "--bytes")),
    "tail": Form(
        valued="ncs",
        long_valued=fs("--lines", "--bytes", "--sleep-interval", "--pid", "--max-unchanged-stats"),
    ),
    "wc": Form(path_options=fs("--files0-from")),
    "stat": Form(valued="c", long_valued=fs("--format", "--printf")),
    "file": Form(
        valued="eFP",
        long_valued=fs("--exclude", "--separator", "--parameter"),
        denied="Cz",
        long_denied=fs("--compile", "--uncompress"),
        path_options=fs("-m", "--magic-file", "-f", "--files-from"),
    ),
    "du": Form(
        valued="Bdt",
        long_valued=fs(
            "--exclude", "--max-depth", "--block-size", "--threshold", "--time", "--time-style"
        ),
        denied="L",
        long_denied=fs("--dereference"),
        path_options=fs("--files0-from", "--exclude-from", "-X"),
    ),
    "df": Form(valued="BtF", long_valued=fs("--block-size", "--type", "--exclude-type")),
    "sort": Form(
        valued="ktSy",
        long_valued=fs(
            "--key", "--field-separator", "--buffer-size", "--parallel", "--batch-size", "--sort"
        ),
        denied="oT",
        long_denied=fs("--output", "--compress-program", "--temporary-directory"),
        path_options=fs("--files0-from", "--random-source"),
    ),
    "uniq": Form(
        valued="fsw",
        long_valued=fs(
            "--skip-fields", "--skip-chars", "--check-chars", "--all-repeated", "--group"
        ),
        max_operands=1,
    ),
    "cut": Form(
        valued="bcdf",
        long_valued=fs("--bytes", "--characters", "--delimiter", "--fields", "--output-delimiter"),
    ),
    "diff": Form(
        valued="CUFIxS",
        long_valued=fs(
            "--label",
            "--ignore-matching-lines",
            "--unified",
            "--context",
            "--show-function-line",
            "--exclude",
            "--starting-file",
            "--line-format",
            "--horizon-lines",
            "--color",
            "--palette",
            "--tabsize",
            "--width",
        ),
        denied="r",
        long_denied=fs("--recursive"),
        path_options=fs("--from-file", "--to-file", "--exclude-from", "-X"),
        extra=_diff_extra,
    ),
    "tree": Form(
        valued="LPI",
        long_valued=fs("--filelimit", "--charset", "--timefmt", "--sort"),
        denied="oRl",
        long_denied=fs("--fromfile", "--fromtabfile", "--output"),
    ),
    "realpath": Form(path_options=fs("--relative-to", "--relative-base")),
    "pwd": Form(operands="none"),
    "true": Form(operands="text"),
    "false": Form(operands="text"),
    "whoami": Form(operands="none"),
    "echo": Form(operands="text"),
    "printf": Form(operands="text", denied="v"),
    "basename": Form(valued="s", long_valued=fs("--suffix"), operands="text"),
    "dirname": Form(operands="text"),
    "which": Form(operands="text"),
    "tr": Form(operands="text", max_operands=2),
    "date": Form(
        valued="dI",
        long_valued=fs("--date", "--iso-8601", "--rfc-3339"),
        denied="s",
        long_denied=fs("--set"),
        operands="text",
        path_options=fs("-f", "--file", "-r", "--reference"),
        extra=_date_extra,
    ),
    "grep": _GREP,
    "rg": _RG,
    "sed": _SED,
    "awk": _AWK,
}
READ_ONLY_COMMANDS = frozenset({*FORMS, "find", "git"})
