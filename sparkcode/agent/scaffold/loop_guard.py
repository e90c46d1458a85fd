"""Noticing a model that goes round in circles within one turn.

Three patterns, each checked before a call runs, each answered by asking the
user whether to go on (the ``loop`` approval), as small models fall into all
three:

- **repeat**: the same call (tool and arguments) :data:`REPEATS` times in a row;
- **cycle**: calls alternating with a period of 2 or 3 (A B A B A, A B C A B C A):
  the call about to run starts the cycle a third time;
- **failing**: the call is the tool that failed the last :data:`FAILURES` times
  in a row, each time with nearly the same arguments (similarity at least
  :data:`SIMILAR`): an edit retried with one character changed, a command with
  another flag.

:attr:`LoopGuard.counts` says how often each pattern asked (``run --json``
reports it in ``TurnFinished.loops``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Literal

LoopKind = Literal["repeat", "cycle", "failing"]
REPEATS = 3
"""Identical consecutive calls that ask (the third is asked about before it runs)."""
PERIODS = (2, 3)
"""Cycle lengths watched; a cycle is asked about when it starts a third time."""
FAILURES = 3
"""Consecutive failed, nearly identical calls of one tool before the next one asks."""
SIMILAR = 0.9
"""Arguments at least this similar (difflib ratio of their JSON) are "nearly the
same": an edit of ``a.py`` whose ``old_string`` changed from ``x = 1`` to ``x = 2``
scores 0.98, ``pytest -x`` against ``pytest -q`` on one file 0.98; reads of
``src/main.py`` and ``src/util.py`` 0.87, of ``README.md`` and ``docs/agent.md``
0.65. Short ones like ``a.py`` and ``b.py`` score 0.94: failing each time, that
is a model guessing file names, a loop too."""


@dataclass(frozen=True)
class Call:
    """What the guard knows of one call."""

    name: str
    arguments: str
    """The arguments as sent (canonical JSON, or the raw text when malformed)."""

    @property
    def signature(self) -> str:
        return f"{self.name}\x00{self.arguments}"


@dataclass
class LoopGuard:
    """The calls of one turn so far and what they did."""

    counts: dict[str, int] = field(default_factory=dict)
    """Times each pattern asked the user, by :data:`LoopKind`."""
    _calls: list[Call] = field(default_factory=list)
    _failed: list[bool] = field(default_factory=list)

    def check(self, call: Call) -> str | None:
        """The question to ask before ``call`` runs, or None (the call is noted)."""
        self._calls.append(call)
        self._failed.append(False)
        found = self._find(call)
        if found is None:
            return None
        kind, question = found
        self.counts[kind] = self.counts.get(kind, 0) + 1
        return question

    def failed(self, failed: bool) -> None:
        """Record how the call last checked ended."""
        if self._failed:
            self._failed[-1] = failed

    def forgive(self) -> None:
        """The user said go on: start watching afresh from the next call."""
        self._calls.clear()
        self._failed.clear()

    def _find(self, call: Call) -> tuple[LoopKind, str] | None:
        calls = self._calls
        if len(calls) >= REPEATS and len({c.signature for c in calls[-REPEATS:]}) == 1:
            return "repeat", (
                f"{call.name} was called {REPEATS} times in a row with the same "
                "arguments; continue?"
            )
        for period in PERIODS:
            window = calls[-(2 * period + 1) :]
            if (
                len(window) == 2 * period + 1
                and len({c.signature for c in window[:period]}) == period
                and all(c.signature == window[i % period].signature for i, c in enumerate(window))
            ):
                names = ", ".join(c.name for c in window[:period])
                return "cycle", (
                    f"the same {period} calls ({names}) keep repeating in a "
                    "cycle, now for the third time; continue?"
                )
        before, outcomes = calls[-FAILURES - 1 : -1], self._failed[-FAILURES - 1 : -1]
        if (
            len(before) == FAILURES
            and all(outcomes)
            and all(c.name == call.name and similar(c.arguments, call.arguments) for c in before)
        ):
            return "failing", (
                f"{call.name} failed {FAILURES} times in a row with nearly the "
                "same arguments and is being tried again; continue?"
            )
        return None


def similar(a: str, b: str) -> bool:
    """Nearly the same arguments (see :data:`SIMILAR`)."""
    return a == b or SequenceMatcher(None, a, b, autojunk=False).ratio() >= SIMILAR
