"""Does the user's message ask a question rather than for a change (or ask for a run)?

``[agent] questions_read_only`` uses it: a turn that only asks is offered no tool
that edits files: a small model asked about a file edited it, and no prompt wording
tried stopped that (docs/experiments/2026-12-02-agent-suite.md).

The rule is plain words, not a model: a message is a question when it asks
(a sentence ending in "?", an opening such as "what", "which", "how", "why",
or "tell me" / "answer with") and names no change ("fix", "add", "rename", ...)
outside a negation such as "do not change any file". A change request read as a
question only loses the edit tools for one turn, and the notice says so.
"""

from __future__ import annotations

import re

from ..tools import KeptFiles, is_test_file

_NEGATED = re.compile(
    r"\b(?:do not|don't|dont|never|without|not)\s+(?:\w+\s+){0,2}?"
    r"(?:chang|edit|modif|touch|writ|fix|updat|delet|remov)\w*[^.?!;]*",
    re.I,
)
"""A change named only to forbid it: "Do not change any file", "without changing it"."""
_CHANGE = re.compile(
    r"\b(?:fix|change|create|add|rename|refactor|rewrite|replace|update|remove|delete|"
    r"implement|write|make|edit|move|modify|insert|append|convert|reformat|format|"
    r"install|commit|apply|patch|correct|improve|optimi[sz]e|clean)\w*",
    re.I,
)
_ASKS = re.compile(
    r"(?:\?(?:\s|$))|^\s*(?:what|which|how|why|where|who|whom|whose|when|does|do|is|are|"
    r"can|could|should|would|will|explain|describe)\b|\btell me\b|\banswer with\b",
    re.I,
)


def is_question(text: str) -> bool:
    """``text`` asks something and asks for no change (see the module's doc)."""
    asked = _NEGATED.sub(" ", text)
    return bool(_ASKS.search(asked)) and not _CHANGE.search(asked)


_RUN = re.compile(r"\brun\b", re.I)


def asks_a_run(text: str) -> bool:
    """``text`` asks to run something (the tests). Such a turn gets no CHANGED_REMINDER,
    under which a small model answered after the edit without the run
    (tests/e2e/test_qwen_coder.py)."""
    return bool(_RUN.search(text))


_VERB = r"(?:chang|edit|modif|touch|alter|rewrit|updat)\w*"
_DONT = r"\b(?:do not|don't|dont|never|must not|should not|without)\s+"
_KEEP_TESTS = re.compile(
    _DONT + r"(?:\w+\s+){0,2}?" + _VERB + r"\s+(?:the\s+|any\s+(?:of\s+the\s+)?)?"
    r"(?:unit\s+)?tests?\b"
    r"|\bnot\s+the\s+tests\b"
    r"|\btests?\b[^.?!;]*?" + _DONT + _VERB + r"\s+(?:them|it)\b"
    r"|\bleave\s+the\s+tests\s+(?:alone|as\s+they\s+are|unchanged)",
    re.I,
)
"""Words that keep the tests: "Do not change the tests", "fix the code (not the tests)",
"keep the tests passing and do not change them", "leave the tests alone"."""
_KEEP_FILE = re.compile(
    _DONT + r"(?:\w+\s+){0,2}?" + _VERB + r"\s+[`'\"]?([\w./-]+\.\w+)[`'\"]?", re.I
)
"""A named file kept: "do not edit test_temps.py"."""


def kept_files(text: str) -> KeptFiles:
    """The files ``text`` says not to change (``[agent] keep_told_files``): the tests, or
    a file it names. A rule of plain words, like :func:`is_question`: a sentence that
    forbids a change it names, not one that asks for a change to the tests ("add a
    test", "fix the tests") or says "do not change its behaviour". Also a test file a
    clause says fails, where the message names other files to change ("test_temps.py
    fails. ... fix the bug in temps.py"): the test is what the fix must satisfy."""
    names = frozenset(m.group(1).rstrip(".") for m in _KEEP_FILE.finditer(text))
    changes = files_to_change(text)
    failing = (
        frozenset(
            name
            for clause in _CLAUSE.split(text)
            if _FAILS.search(clause) and not _CHANGE.search(_NEGATED.sub(" ", clause))
            for name in (m.group(1) for m in _FILE.finditer(clause))
            if is_test_file(name) and name not in changes
        )
        if changes
        else frozenset()
    )
    return KeptFiles(
        tests=bool(_KEEP_TESTS.search(text)),
        names=names,
        failing=failing,
        instead=changes if failing else (),
    )


_FAILS = re.compile(r"\b(?:fails?|failing|failed|errors?|breaks|is broken|are broken)\b", re.I)
"""A clause that says a test fails: "test_temps.py fails", "test_calc.py is failing"."""


_FILE = re.compile(
    r"(?<![\w./-])((?:[\w-]+/)*[A-Za-z_][\w-]*\.[A-Za-z][A-Za-z0-9]{0,7})"
    r"(?!\.?[\w/(-])"
)
"""A file name as a task writes it: ``limits.py``, ``src/app.ts``, ``config.json``; not
``3.14159``, ``low..high``, ``e.g.``, ``os.path.join`` or a call such as ``x.strip(``."""
_NOT_FILES = frozenset({"e.g", "i.e"})


_CLAUSE = re.compile(r"[.;!?](?:\s|$)|,\s|\n")
"""Where a task's clauses end: a sentence's end, a comma, a line break."""
_BRACKETS = re.compile(r"\([^()]*\)")
"""A bracket's commas end no clause: "clamp(x, low, high) to limits.py"."""


def files_to_change(text: str) -> tuple[str, ...]:
    """The file names ``text`` asks to change, in order, each once: those in a clause that
    names a change ("add a test for it to test_limits.py", "rename ... in a.py and b.py"),
    not those in one that only describes ("test_calc.py fails"). Plain words again, for
    ``NAMED_FILES_REMINDER``: "look at main.py and fix util.py" counts main.py too."""
    seen: dict[str, None] = {}
    unbracketed = _BRACKETS.sub(lambda m: m.group(0).replace(",", " "), text)
    for clause in _CLAUSE.split(_NEGATED.sub(" ", unbracketed)):
        if not _CHANGE.search(clause):
            continue
        for match in _FILE.finditer(clause):
            if match.group(1).lower() not in _NOT_FILES:
                seen.setdefault(match.group(1), None)
    return tuple(seen)


__all__ = ["asks_a_run", "is_question", "files_to_change", "kept_files"]
