"""Turn-level undo and redo: the conversation and the workspace go back together.

Each turn leaves a :class:`TurnMark`: where its user message sits in the
history and the undo snapshot taken before its first change (none if it
changed no file). Undoing the last turn restores that snapshot and cuts the
history back to just before the turn's user message, so the next request's
prefix is the earlier one and the engine's prefix cache still hits. What was
undone is kept (the messages, and a capture of the workspace as the turn left
it) until the next turn starts, so redo puts both back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .context import Message
from .events import RedoApplied, UndoApplied
from .undo import UndoError, UndoStore


@dataclass
class TurnMark:
    """One turn of the conversation, as undo needs it."""

    turn: int
    start: int
    """History index of the turn's user message."""
    snapshot: str | None = None
    """The undo snapshot taken before the turn's first change."""


@dataclass
class _Undone:
    mark: TurnMark
    messages: list[Message]
    after: str | None
    """The workspace as the turn left it (a capture), when the turn changed files."""


@dataclass
class Rewind:
    """The marks of the conversation's turns and what was undone."""

    marks: list[TurnMark] = field(default_factory=list)
    undone: list[_Undone] = field(default_factory=list)

    def begin(self, turn: int, start: int) -> None:
        """A new turn starts at history index ``start``; redo is no longer possible."""
        self.marks.append(TurnMark(turn, start))
        self.undone.clear()

    def snapshot_taken(self, snapshot: str) -> None:
        if self.marks and self.marks[-1].snapshot is None:
            self.marks[-1].snapshot = snapshot

    def reset(self) -> None:
        self.marks.clear()
        self.undone.clear()

    def compacted(self, turn: int, start: int) -> None:
        """Older turns became a summary: only the current turn can still be undone."""
        kept = [m for m in self.marks if m.turn == turn]
        self.marks = [TurnMark(turn, start, kept[0].snapshot if kept else None)]
        self.undone.clear()

    def undo(
        self, history: list[Message], store: UndoStore | None
    ) -> tuple[list[Message], UndoApplied]:
        """The history without its last turn, and the event saying what changed."""
        if not self.marks:
            raise UndoError("nothing to undo: no turn of this conversation is left")
        mark = self.marks[-1]
        after: str | None = None
        changed: list[str] = []
        if mark.snapshot is not None:
            if store is None:
                raise UndoError("undo is not available (no snapshot store)")
            after = store.capture(f"after turn {mark.turn}")
            changed = store.restore(mark.snapshot)
            store.drop(mark.snapshot)
        self.marks.pop()
        removed = history[mark.start :]
        self.undone.append(_Undone(mark, removed, after))
        return history[: mark.start], UndoApplied(
            snapshot=mark.snapshot or "",
            changed=tuple(changed),
            turn=mark.turn,
            messages_removed=len(removed),
        )

    def redo(
        self, history: list[Message], store: UndoStore | None
    ) -> tuple[list[Message], RedoApplied]:
        """The history with the last undone turn back, and the event."""
        if not self.undone:
            raise UndoError("nothing to redo: no turn was undone since the last one")
        entry = self.undone[-1]
        if len(history) != entry.mark.start:
            raise UndoError("nothing to redo: the conversation moved on since the undo")
        changed: list[str] = []
        if entry.after is not None and entry.mark.snapshot is not None:
            if store is None:
                raise UndoError("redo is not available (no snapshot store)")
            changed = store.restore(entry.after)
            store.push(entry.mark.snapshot)
        self.undone.pop()
        self.marks.append(entry.mark)
        return [*history, *entry.messages], RedoApplied(
            turn=entry.mark.turn, changed=tuple(changed), messages_restored=len(entry.messages)
        )
