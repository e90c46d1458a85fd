"""How edit_file copes with drifted copies: share applied correctly, wrong applications.

The corpus is built from real code (the Python standard library's sources):
each case takes a block of 1-6 lines that occurs exactly once in its file,
changes it as a model would (edit a line, add a line at the same depth or one
level deeper, drop a line), and then makes the model's copy drift the way
local models' copies do:

- ``trailing``: trailing spaces or tabs on some lines of old_string;
- ``tabs``: the file is indented with tabs, the model's copy with spaces;
- ``spaces``: the file is indented with spaces, the model's copy with tabs;
- ``reindent``: the copy (old and new) is flush-left or four spaces deeper;
- ``crlf``: the file has CRLF line ends and the copy LF; ``lf``: the reverse;
- ``mixed``: re-indented and trailing spaces at once;
- ``exact``: no drift (a control);
- ``content``: a real character of old_string differs (a wrong copy): these
  must be refused, never applied.

Every case is run through the real ``edit_file`` tool on a file in a temp
directory. *Correct* means the file afterwards equals the file with the
intended change made at the intended place (in the file's own indentation and
line ends); *wrong* means the tool wrote anything else; *refused* means it
returned an error and left the file alone.
Shared on purpose: ``bench/studies/edit_drift.py`` runs 900 cases for docs/agent.md's
figure, ``tests/sparkcode/agent/tools/test_edits.py`` a slice in CI.
"""

from __future__ import annotations

import random
import re
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sparkcode.agent.tools import EditFile, ToolContext, ToolError

DRIFTS = ("exact", "trailing", "tabs", "spaces", "reindent", "crlf", "lf", "mixed", "content")


@dataclass(frozen=True)
class Case:
    drift: str
    file: str
    """The file as it is on disk before the edit."""
    old: str
    new: str
    """The edit as the model sends it (drifted)."""
    expected: str | None
    """The file after the intended edit; None = the edit must be refused."""


def _sources(limit: int = 60) -> list[str]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for path in sorted(stdlib.glob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if "\t" in text or "\r" in text or len(text) > 60_000:
            continue
        out.append(text)
        if len(out) >= limit:
            break
    return out


def _indent(line: str) -> str:
    m = re.match(r"[ \t]*", line)
    return m.group(0) if m else ""


def _tabs(text: str) -> str:
    """Four-space indentation groups -> tabs (leading whitespace only)."""
    out = []
    for line in text.splitlines(keepends=True):
        ws = _indent(line)
        out.append(ws.replace("    ", "\t") + line[len(ws) :])
    return "".join(out)


def _shift(text: str, base: str, to: str) -> str:
    out = []
    for line in text.splitlines(keepends=True):
        out.append(to + line[len(base) :] if line.startswith(base) and line.strip() else line)
    return "".join(out)


def _change(block: list[str], rng: random.Random) -> list[str]:
    """The model's intended new version of ``block`` (undrifted)."""
    new = list(block)
    content = [i for i, ln in enumerate(block) if ln.strip()]
    i = rng.choice(content)
    body = block[i].rstrip("\n")
    kind = rng.choice(
        ("edit", "same", "deeper", "drop") if len(content) > 1 else ("edit", "same", "deeper")
    )
    if kind == "edit":
        new[i] = body + "  # changed\n"
    elif kind == "same":
        new.insert(i + 1, _indent(body) + "log('added')\n")
    elif kind == "deeper":
        new.insert(i + 1, _indent(body) + "    pass  # added\n")
    else:
        del new[i]
    return new


def build(cases: int, seed: int = 0) -> list[Case]:
    rng = random.Random(seed)
    sources = _sources()
    out: list[Case] = []
    while len(out) < cases:
        text = rng.choice(sources)
        lines = text.splitlines(keepends=True)
        k = rng.randint(1, 6)
        start = rng.randrange(0, max(1, len(lines) - k))
        block = lines[start : start + k]
        if not block[0].strip() or not block[-1].endswith("\n") or len(block) < k:
            continue
        old = "".join(block)
        if text.count(old) != 1 or len(old.strip()) < 12:
            continue
        new = "".join(_change(block, rng))
        drift = DRIFTS[len(out) % len(DRIFTS)]
        before, after = "".join(lines[:start]), "".join(lines[start + k :])
        expected = before + new + after
        base = min((_indent(ln) for ln in block if ln.strip()), key=len)
        if drift == "exact":
            out.append(Case(drift, text, old, new, expected))
        elif drift == "trailing":
            drifted = "".join(
                ln.rstrip("\n") + rng.choice((" ", "  ", "\t", " \t")) + "\n"
                if ln.strip() and rng.random() < 0.7
                else ln
                for ln in block
            )
            out.append(Case(drift, text, drifted, new, expected))
        elif drift == "tabs":
            if old in _tabs(text):
                continue  # no indentation to drift: the copy matches exactly
            out.append(Case(drift, _tabs(text), old, new, _tabs(expected)))
        elif drift == "spaces":
            if _tabs(old) == old:
                continue
            out.append(Case(drift, text, _tabs(old), _tabs(new), expected))
        elif drift in ("reindent", "mixed"):
            to = rng.choice(("", base + "    ")) if base else "    "
            old_d, new_d = _shift(old, base, to), _shift(new, base, to)
            if old_d.count("\n") > 1 and old_d in text:
                continue  # the shifted copy is another place's exact text: not drift
            if drift == "mixed":
                old_d = "".join(
                    ln.rstrip("\n") + "  \n" if ln.strip() else ln
                    for ln in old_d.splitlines(keepends=True)
                )
            out.append(Case(drift, text, old_d, new_d, expected))
        elif drift == "crlf":
            crlf = text.replace("\n", "\r\n")
            out.append(Case(drift, crlf, old, new, expected.replace("\n", "\r\n")))
        elif drift == "lf":
            out.append(
                Case(drift, text, old.replace("\n", "\r\n"), new.replace("\n", "\r\n"), expected)
            )
        else:  # content: one visible character of the copy is wrong
            spots = [i for i, c in enumerate(old) if c.isalnum()]
            i = rng.choice(spots)
            wrong = old[:i] + ("x" if old[i] != "x" else "y") + old[i + 1 :]
            if wrong in text:
                continue
            out.append(Case(drift, text, wrong, new, None))
    return out


@dataclass
class Outcome:
    correct: int = 0
    wrong: int = 0
    refused: int = 0


async def evaluate(cases: list[Case]) -> dict[str, Outcome]:
    tool = EditFile()
    results: dict[str, Outcome] = {}
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        ctx = ToolContext(workspace=ws)
        path = ws / "f.py"
        for case in cases:
            path.write_bytes(case.file.encode())
            outcome = results.setdefault(case.drift, Outcome())
            try:
                await tool.run(
                    {"path": "f.py", "old_string": case.old, "new_string": case.new}, ctx
                )
            except ToolError:
                if path.read_bytes().decode() != case.file:
                    outcome.wrong += 1  # a refusal that still changed the file
                else:
                    outcome.refused += 1
                continue
            after = path.read_bytes().decode()
            if case.expected is not None and after == case.expected:
                outcome.correct += 1
            else:
                outcome.wrong += 1
    return results
