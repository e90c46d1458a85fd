"""Files a turn's message says not to change ("do not change the tests", "do not
edit test_temps.py"): the edit tools refuse them for that turn (``[agent]
keep_told_files``; the words are read by ``sparkcode.agent.scaffold.message_words.kept_files``).

Qwen2.5-Coder-1.5B edited the tests it was told not to change in the agent suite
(fix-test-mean, docs/agent.md) and, in a tmux run on 2026-12-03, proposed two edits
of test_temps.py after "Do not change the tests." A refusal that says why costs one
step; an edited test makes the task fail whatever else the model does. Told "test_temps.py
fails. Run the tests ..., fix the bug in temps.py, then run the tests again." without
"do not change the tests", it left test_temps.py changed in 5 of 12 sampled runs (W8A8
and bf16, 2026-12-04), so a failing test the message names is kept too when the message
names other files to change.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import PurePosixPath

from ._base import ToolContext, ToolError

TEST_FILES = (
    "test_*.py",
    "*_test.py",
    "*_test.go",
    "*.test.js",
    "*.test.ts",
    "*.test.jsx",
    "*.test.tsx",
    "*.spec.js",
    "*.spec.ts",
    "*_spec.rb",
    "conftest.py",
)
"""File names that are tests (pytest's, Go's, Jest's and RSpec's conventions)."""
TEST_DIRS = frozenset({"tests", "test", "__tests__", "spec"})
"""A file under a directory of one of these names is a test file."""


def is_test_file(rel: str) -> bool:
    """``rel`` (a path relative to the workspace) names a test file."""
    parts = PurePosixPath(rel).parts
    return any(part in TEST_DIRS for part in parts[:-1]) or any(
        fnmatch.fnmatch(parts[-1], pattern) for pattern in TEST_FILES
    )


@dataclass(frozen=True)
class KeptFiles:
    """What one message keeps as it is."""

    tests: bool = False
    """The message says not to change the tests."""
    names: frozenset[str] = frozenset()
    """File names or paths the message says not to change, as written."""
    failing: frozenset[str] = frozenset()
    """Test files the message says fail while it names other files to change ("test_temps.py
    fails ... fix the bug in temps.py"): the failing test shows what the code must do."""
    instead: tuple[str, ...] = ()
    """The files the message asks to change (named in ``failing``'s refusal)."""

    def __bool__(self) -> bool:
        return self.tests or bool(self.names) or bool(self.failing)

    def describe(self) -> str:
        """What this turn keeps and why, for the turn's notice."""
        told = [*(["the tests"] if self.tests else []), *sorted(self.names)]
        said = [f"says not to change {' and '.join(told)}"] if told else []
        failing = sorted(self.failing)
        if failing:
            said.append(
                f"says {' and '.join(failing)} fails and asks for a change in "
                f"{' and '.join(self.instead)}"
            )
        return (
            f"this message {'; it '.join(said)}, so edits of "
            f"{' and '.join([*told, *failing])} are refused this turn ([agent] keep_told_files)"
        )

    def why(self, rel: str) -> str | None:
        """Why ``rel`` is kept, in words for the model, or None."""
        if self.tests and is_test_file(rel):
            return "the task says not to change the tests; change the code they test instead"
        name = PurePosixPath(rel).name
        if any(rel == kept or name == kept for kept in self.names):
            return f"the task says not to change {name}; leave it as it is"
        if any(rel == kept or name == kept for kept in self.failing):
            return (
                f"the task says {name} fails, so it shows what the code must do; change "
                f"{' and '.join(self.instead)} instead"
            )
        return None


def refuse_a_kept_file(ctx: ToolContext, shown: str) -> None:
    """Raise the refusal for ``shown`` (a workspace-relative path) where this turn's
    message keeps it."""
    if ctx.kept is not None:
        why = ctx.kept.why(shown)
        if why:
            raise ToolError(f"{shown} was not changed: {why}")
