"""Messages typed while a turn runs, shown above the prompt until they are delivered."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Static

PREVIEW_CHARS = 90
"""Characters of a queued message shown on its line (the rest is elided)."""

QueueAction = Literal["edit", "remove", "steer"]


@dataclass(eq=False)
class Queued:
    """One queued message (compared by identity: the same text may be queued twice)."""

    text: str
    steering: bool = False
    """Handed to the running turn (``Agent.steer``): it goes in after the current
    tool results instead of after the turn."""


class QueuedMessage(Static, can_focus=True):
    """One line of the queue: e edits, s sends now (steer), Delete removes."""

    DEFAULT_CSS = """
    QueuedMessage {
        height: 1;
        padding: 0 1;
        color: $text-muted;
        &:focus { background: $boost; color: $text; }
        &.-steering { color: $accent; }
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("e,enter", "act('edit')", "Edit"),
        Binding("s", "act('steer')", "Send now"),
        Binding("delete,backspace,x", "act('remove')", "Remove"),
    ]

    steering: reactive[bool] = reactive(False, toggle_class="-steering")
    """Shown as going in at the turn's next step rather than after it."""

    class Acted(Message):
        """The user asked to edit, remove or steer one queued message."""

        def __init__(self, item: Queued, action: QueueAction) -> None:
            super().__init__()
            self.item = item
            self.action = action

    def __init__(self, item: Queued) -> None:
        super().__init__()
        self.item = item
        self.steering = item.steering

    def render(self) -> Text:
        first = self.item.text.strip().splitlines()[0] if self.item.text.strip() else ""
        more = len(first) > PREVIEW_CHARS or "\n" in self.item.text.strip()
        when = "next step" if self.steering else "after turn"
        line = Text(f"⏳ {when}: ", style="bold")
        line.append(first[:PREVIEW_CHARS] + ("…" if more else ""))
        return line

    def action_act(self, action: QueueAction) -> None:
        self.post_message(self.Acted(self.item, action))


class MessageQueue(Vertical):
    """The queued messages in order; hidden when there are none."""

    DEFAULT_CSS = """
    MessageQueue {
        height: auto;
        max-height: 8;
        margin: 0 1;
        display: none;
        &.-shown { display: block; }
        #queue-hint { height: 1; padding: 0 1; color: $text-disabled; }
    }
    """

    HINT = "queued · Ctrl+S: send now (steer) · Shift+Tab: select (e edit, s send, Del remove)"
    """Fits an 88-column terminal (the hint's line is cut, not wrapped)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.items: list[Queued] = []
        """The queue, first out first."""

    def compose(self) -> list[Static]:
        return [Static(self.HINT, id="queue-hint")]

    async def add(self, text: str, *, steering: bool = False) -> Queued:
        item = Queued(text, steering)
        self.items.append(item)
        await self.mount(QueuedMessage(item))
        self.set_class(True, "-shown")
        return item

    async def remove_item(self, item: Queued) -> None:
        if item in self.items:
            self.items.remove(item)
        for line in self.query(QueuedMessage):
            if line.item is item:
                await line.remove()
        self.set_class(bool(self.items), "-shown")

    def set_steering(self, item: Queued, steering: bool) -> None:
        item.steering = steering
        for line in self.query(QueuedMessage):
            if line.item is item:
                line.steering = steering

    def find(self, text: str, *, steering: bool) -> Queued | None:
        """The first queued message with ``text`` (and that steering state)."""
        return next((i for i in self.items if i.text == text and i.steering == steering), None)

    def lines(self) -> list[QueuedMessage]:
        return list(self.query(QueuedMessage))
