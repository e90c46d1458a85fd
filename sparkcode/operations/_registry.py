"""The registry of conversation operations: each slash command declared once.

An :class:`Operation` is what both fronts read: its name, help text, argument
(:class:`Arg`: its usage, allowed values, whether it is a whole number), the fronts
that offer it (with the reason when only one does) and, where it can be written
once, the operation itself: a :attr:`Operation.setting` (a change applied to the
agent, and the sentence that says it) or a :attr:`Operation.query` (an answer read
from the agent). The TUI's commands, completion and palette and ACP's available
commands and dispatch are built from :data:`REGISTRY`, so a new slash command is one
:func:`register` call that both fronts show.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from ._ops import Ops

Front = Literal["tui", "acp"]
FRONTS: tuple[Front, ...] = ("tui", "acp")
BOTH: frozenset[Front] = frozenset(FRONTS)


class OperationError(ValueError):
    """An operation that cannot run (a bad argument, nothing to act on); the message
    says why."""


@dataclass(frozen=True)
class Arg:
    """What an operation takes after its name."""

    usage: str = ""
    """How the usage line shows it (``N``, ``[FOCUS]``); empty with :attr:`choices`:
    the choices joined by ``|``."""
    choices: tuple[str, ...] = ()
    """The allowed values (empty: free-form)."""
    integer: bool = False
    """The argument must be a whole number."""

    @property
    def shown(self) -> str:
        return self.usage or "|".join(self.choices)

    @property
    def hint(self) -> str:
        """The hint an editor shows in the input (ACP's ``UnstructuredCommandInput``)."""
        shown = self.shown
        inner = shown[1:-1]
        if shown.startswith("[") and shown.endswith("]") and "[" not in inner:
            return f"{inner} (optional)"
        return shown


@dataclass(frozen=True)
class Setting:
    """A change to the agent and the sentence that says it."""

    apply: Callable[[Ops], None]
    said: str


@dataclass(frozen=True)
class Reply:
    """What a query answers; ``markdown``: a table or document, not a sentence."""

    text: str
    markdown: bool = False


@dataclass(frozen=True)
class Operation:
    """One slash command, for every front that offers it."""

    name: str
    help: str
    arg: Arg | None = None
    fronts: frozenset[Front] = BOTH
    only_here: str = ""
    """Why only the fronts in :attr:`fronts` offer it (empty when both do)."""
    idle_only: bool = False
    """Refused while a turn runs (it changes the conversation)."""
    palette: str = ""
    """Its title in the TUI's command palette (empty: not listed there)."""
    setting: Callable[[str], Setting] | None = None
    """The change the argument asks for, written once for both fronts."""
    query: Callable[[Ops, str], Awaitable[Reply]] | None = None
    """The answer, written once for both fronts (it needs the agent built)."""
    no_agent: str = ""
    """What a query says before there is an agent to ask."""

    @property
    def usage(self) -> str:
        return f"/{self.name}" + (f" {self.arg.shown}" if self.arg is not None else "")

    @property
    def choices(self) -> tuple[str, ...]:
        return self.arg.choices if self.arg is not None else ()

    def check(self, arg: str) -> None:
        """Refuse an argument the operation does not take (:class:`OperationError`
        naming the usage)."""
        if self.arg is not None and self.arg.choices and arg not in self.arg.choices:
            raise OperationError(f"usage: {self.usage}")
        if self.arg is not None and self.arg.integer and not arg.isdigit():
            raise OperationError(f"usage: {self.usage} (a whole number of tokens)")


REGISTRY: dict[str, Operation] = {}
"""Every operation by name, in declaration order (the order ``/help`` lists them)."""


def register(op: Operation) -> Operation:
    if op.name in REGISTRY:
        raise ValueError(f"slash command /{op.name} is declared twice")
    if not op.fronts or not op.fronts <= BOTH:
        raise ValueError(f"/{op.name}: fronts must be some of {', '.join(FRONTS)}")
    if op.fronts != BOTH and not op.only_here:
        raise ValueError(f"/{op.name} is offered by one front only: say why (only_here)")
    REGISTRY[op.name] = op
    return op


@contextmanager
def registered(op: Operation) -> Iterator[Operation]:
    """``op`` in the registry for the block (tests)."""
    register(op)
    try:
        yield op
    finally:
        del REGISTRY[op.name]


def offered(front: Front) -> list[Operation]:
    """The operations ``front`` offers, in declaration order."""
    return [op for op in REGISTRY.values() if front in op.fronts]


__all__ = [
    "BOTH",
    "FRONTS",
    "REGISTRY",
    "Arg",
    "Front",
    "Operation",
    "OperationError",
    "Reply",
    "Setting",
    "offered",
    "register",
    "registered",
]
