"""The agent suite's tasks, which are data: one TOML file per task in
``sparkcode/bench/agent_tasks/`` (8 kinds x 3 tasks), read and checked here.

A task file holds ``kind``, ``prompt``, the starting ``[files]`` of its
workspace, a ``[check]`` (every condition must hold for the try to succeed) and
a reference ``[solution]`` (files to write or delete and an answer) that the
tests apply to prove the task solvable and its check able to fail. Workspaces
are a few files of under 30 lines, so a 135M model's 8K context holds the
whole project with the agent's prompts.

Check conditions:

- ``answer``: substrings the final answer must all contain (case-insensitive);
- ``tests``: the workspace's tests (``python -m unittest``) pass, and at least
  this many ran;
- ``python``: a snippet run in the workspace (``python -c``) must exit 0;
- ``[[check.files]]``: ``path``, ``exists`` (default true), ``contains`` and
  ``lacks`` (substrings), ``once`` (substrings present exactly once);
- ``nowhere``: text no file of the workspace may hold (a rename);
- ``unchanged``: files identical to the starting commit (the tests of a fix);
- ``clean``: nothing in the workspace changed (``git status`` is empty).

Code the model wrote runs inside the bubblewrap sandbox the agent's shell tool
uses (the workspace writable, no network), the same as during the try.
"""

from __future__ import annotations

import functools
import hashlib
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from engine.errors import UserError
from sparkcode.agent.tools import Sandbox

KINDS = (
    "answer",
    "fix-line",
    "fix-test",
    "create",
    "rename",
    "add-function",
    "run-tests",
    "refactor",
)
"""In table order: question about the code, one-line bug, bug a failing test shows, new
file, rename across files, new function with a test, run the tests and report,
behaviour-preserving refactor."""
GITIGNORE = "__pycache__/\n*.pyc\n"
"""Every workspace ignores bytecode: running the tests must not dirty ``git status``."""
CHECK_TIMEOUT_S = 60.0
GIT_ID = (
    "-c",
    "user.name=sparkcode-bench",
    "-c",
    "user.email=bench@sparkcode.invalid",
    "-c",
    "commit.gpgsign=false",
)


@dataclass(frozen=True)
class FileCheck:
    path: str
    exists: bool = True
    contains: tuple[str, ...] = ()
    lacks: tuple[str, ...] = ()
    once: tuple[str, ...] = ()


@dataclass(frozen=True)
class Check:
    answer: tuple[str, ...] = ()
    tests: int | None = None
    python: str | None = None
    files: tuple[FileCheck, ...] = ()
    nowhere: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    clean: bool = False


@dataclass(frozen=True)
class Solution:
    answer: str = "Done."
    files: dict[str, str] = field(default_factory=dict)
    delete: tuple[str, ...] = ()


@dataclass(frozen=True)
class Task:
    id: str
    kind: str
    prompt: str
    files: dict[str, str]
    check: Check
    solution: Solution
    digest: str
    """sha256 of the task file (a resumed run must use the same tasks)."""


def _parse(name: str, text: str) -> Task:
    def fail(why: str) -> UserError:
        return UserError(f"agent task {name}.toml: {why}")

    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise fail(str(exc)) from None

    def keys(table: dict[str, Any], allowed: set[str], where: str) -> None:
        unknown = sorted(set(table) - allowed)
        if unknown:
            raise fail(f"unknown key(s) in {where}: {', '.join(unknown)}")

    keys(doc, {"kind", "prompt", "files", "check", "solution"}, "the file")
    if doc.get("kind") not in KINDS:
        raise fail(f"kind must be one of {', '.join(KINDS)}, got {doc.get('kind')!r}")
    if not isinstance(doc.get("prompt"), str) or not doc.get("files"):
        raise fail("needs a prompt and [files]")
    check = dict(doc.get("check") or {})
    keys(check, {"answer", "tests", "python", "files", "nowhere", "unchanged", "clean"}, "[check]")
    if not check:
        raise fail("[check] is empty: a task without a check always succeeds")
    files = []
    for entry in check.pop("files", []):
        keys(entry, {"path", "exists", "contains", "lacks", "once"}, "[[check.files]]")
        files.append(
            FileCheck(
                entry["path"],
                bool(entry.get("exists", True)),
                *(tuple(entry.get(k, ())) for k in ("contains", "lacks", "once")),
            )
        )
    solution = dict(doc.get("solution") or {})
    keys(solution, {"answer", "files", "delete"}, "[solution]")
    return Task(
        id=name,
        kind=doc["kind"],
        prompt=doc["prompt"].strip(),
        files={str(k): str(v) for k, v in doc["files"].items()},
        check=Check(
            answer=tuple(check.get("answer", ())),
            tests=check.get("tests"),
            python=check.get("python"),
            files=tuple(files),
            nowhere=tuple(check.get("nowhere", ())),
            unchanged=tuple(check.get("unchanged", ())),
            clean=bool(check.get("clean", False)),
        ),
        solution=Solution(
            answer=str(solution.get("answer", "Done.")),
            files={str(k): str(v) for k, v in solution.get("files", {}).items()},
            delete=tuple(solution.get("delete", ())),
        ),
        digest=hashlib.sha256(text.encode()).hexdigest(),
    )


@functools.cache
def load_tasks() -> dict[str, Task]:
    """Every task, by id (the file's name), kinds in :data:`KINDS` order."""
    folder = resources.files("sparkcode.bench") / "agent_tasks"
    found = [
        _parse(f.name.removesuffix(".toml"), f.read_text(encoding="utf-8"))
        for f in folder.iterdir()
        if f.name.endswith(".toml")
    ]
    found.sort(key=lambda t: (KINDS.index(t.kind), t.id))
    return {t.id: t for t in found}


def select(tasks: list[str] | None, kinds: list[str] | None) -> list[str]:
    """Task ids named by ``--task`` and ``--kind`` (both: the union); none: all."""
    known = load_tasks()
    bad = [t for t in tasks or [] if t not in known]
    if bad:
        raise UserError(
            f"unknown agent task(s): {', '.join(bad)}; the tasks are: "
            f"{', '.join(known)} (`sparkcode bench agent --list`)"
        )
    bad = [k for k in kinds or [] if k not in KINDS]
    if bad:
        raise UserError(
            f"unknown task kind(s): {', '.join(bad)}; the kinds are: {', '.join(KINDS)}"
        )
    if not tasks and not kinds:
        return list(known)
    return [t.id for t in known.values() if t.id in (tasks or []) or t.kind in (kinds or [])]


def _git(ws: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *GIT_ID, *args], cwd=ws, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S
    )
    if done.returncode != 0:
        raise UserError(f"git {' '.join(args)} failed in {ws}: {done.stderr.strip()[:300]}")
    return done.stdout


def make_workspace(task: Task, ws: Path) -> Path:
    """The task's files in a new git repository at ``ws``, committed once."""
    ws.mkdir(parents=True)
    for rel, text in {".gitignore": GITIGNORE, **task.files}.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text, encoding="utf-8")
    _git(ws, "init", "-q", "-b", "main")
    for key, value in (
        ("user.name", "sparkcode-bench"),
        ("user.email", "bench@sparkcode.invalid"),
        ("commit.gpgsign", "false"),
    ):
        _git(ws, "config", key, value)  # the agent's git_commit tool needs an identity
    _git(ws, "add", "-A")
    _git(ws, "commit", "-q", "-m", f"task {task.id}: starting files")
    return ws


def apply_solution(task: Task, ws: Path) -> str:
    """Write the reference solution into ``ws``; returns its answer."""
    for rel in task.solution.delete:
        (ws / rel).unlink()
    for rel, text in task.solution.files.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text, encoding="utf-8")
    return task.solution.answer


def workspace_diff(ws: Path, limit: int = 6000) -> str:
    """What the try changed, new files included (``git add -N``), cut at ``limit``."""
    _git(ws, "add", "-A", "-N")
    diff = _git(ws, "diff", "HEAD")
    return diff if len(diff) <= limit else diff[:limit] + f"\n[... {len(diff) - limit} more]"


def _run(ws: Path, command: list[str], sandbox: Sandbox | None) -> tuple[int | None, str]:
    """Exit status (None: timed out) and output of ``command`` in ``ws``."""
    argv = sandbox.argv(shlex.join(command), ws) if sandbox is not None else command
    try:
        done = subprocess.run(
            argv,
            cwd=ws,
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return None, ""
    return done.returncode, done.stdout + done.stderr


def _files(ws: Path) -> list[Path]:
    return [
        p
        for p in sorted(ws.rglob("*"))
        if p.is_file() and not {".git", "__pycache__"} & set(p.relative_to(ws).parts)
    ]


def check(task: Task, ws: Path, answer: str, sandbox: Sandbox | None) -> list[str]:
    """What failed (empty: the try succeeded), each a short sentence."""
    c = task.check
    failed = [
        f"the answer does not mention {a!r}" for a in c.answer if a.lower() not in answer.lower()
    ]
    for f in c.files:
        path = ws / f.path
        if not path.is_file():
            if f.exists:
                failed.append(f"{f.path} does not exist")
            continue
        if not f.exists:
            failed.append(f"{f.path} still exists")
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        failed += [f"{f.path} lacks {s!r}" for s in f.contains if s not in text]
        failed += [f"{f.path} still holds {s!r}" for s in f.lacks if s in text]
        failed += [
            f"{f.path} holds {s!r} {text.count(s)} times, not once"
            for s in f.once
            if text.count(s) != 1
        ]
    for text in c.nowhere:
        holders = [
            p.relative_to(ws).as_posix()
            for p in _files(ws)
            if text in p.read_text(encoding="utf-8", errors="replace")
        ]
        if holders:
            failed.append(f"{text!r} is still in {', '.join(holders)}")
    for rel in c.unchanged:
        if not (ws / rel).is_file() or _git(ws, "status", "--porcelain", "--", rel).strip():
            failed.append(f"{rel} was changed (it must stay as committed)")
    if c.clean:
        changed = _git(ws, "status", "--porcelain").strip()
        if changed:
            failed.append("the workspace was changed: " + " ".join(changed.split())[:200])
    if c.python is not None:
        code, out = _run(ws, [sys.executable, "-B", "-c", c.python], sandbox)
        if code != 0:
            last = out.strip().splitlines()[-1:] or ["timed out" if code is None else ""]
            failed.append(f"the check program failed: {last[0][:200]}")
    if c.tests is not None:
        code, out = _run(ws, [sys.executable, "-B", "-m", "unittest"], sandbox)
        ran = re.search(r"^Ran (\d+) tests?", out, re.MULTILINE)
        count = int(ran.group(1)) if ran else 0
        if code is None:
            failed.append("the tests timed out")
        elif code != 0:
            summary = re.search(r"^FAILED \(.*\)$", out, re.MULTILINE)
            failed.append(f"the tests fail ({summary.group(0) if summary else f'exit {code}'})")
        elif count < c.tests:
            failed.append(f"{count} tests ran, at least {c.tests} expected")
    return failed
