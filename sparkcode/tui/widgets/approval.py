"""Approvals: a card per pending request (an edit's diff or a shell command, approve or
deny) in a stack that is shown while any card waits.

Only its own keys answer it (y, a, n, escape, the buttons). Any other printable
key means the user is typing a message: the card posts :class:`ApprovalCard.Typing`
and the screen moves the key to the prompt, so the rest of the text cannot
answer the card by its letters. A card does not take the focus itself: it posts
:class:`ApprovalCard.Shown` and the screen gives it the focus unless the user is
typing in the prompt right then (their next letter would answer it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Button, Static

from sparkcode.agent.core.events import ApprovalDecision, ApprovalRequested

from .tool_card import diff_text

_TITLES = {
    "edit": "Apply this edit?",
    "shell": "Run this command?",
    "git": "Run this git operation?",
    "loop": "The model repeated the same tool call. Go on?",
    "other": "Allow this tool call?",
}


class ApprovalCard(Vertical, can_focus=True):
    """Asks the user about one :class:`ApprovalRequested`; answers it once."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "approve", "Approve"),
        Binding("a", "always", "Always allow"),
        Binding("n", "deny", "Deny"),
        Binding("escape", "deny", "Deny", show=False),
    ]
    ANSWER_KEYS: ClassVar[frozenset[str]] = frozenset({"y", "a", "n"})

    @dataclass
    class Typing(Message):
        """A key that is not an answer was typed on ``card``: it belongs in the prompt."""

        card: ApprovalCard
        character: str

    @dataclass
    class Shown(Message):
        """``card`` is on screen and waits; whoever owns the focus decides whether it
        takes it."""

        card: ApprovalCard

    @dataclass
    class Decided(Message):
        """The user answered the request shown on ``card``."""

        card: ApprovalCard
        decision: ApprovalDecision

    def __init__(self, request: ApprovalRequested) -> None:
        super().__init__(classes=f"approval -{request.kind}")
        self.request = request
        """The pending request this card answers."""
        self._answered = False
        self._typing = False

    def compose(self) -> ComposeResult:
        request = self.request
        yield Static(
            Text(_TITLES.get(request.kind, _TITLES["other"]), style="bold"),
            classes="approval-title",
        )
        yield Static(Text(f"{request.tool}: {request.summary}"), classes="approval-summary")
        detail = (
            diff_text(request.detail)
            if request.kind == "edit"
            else Text(request.detail, style="bold")
        )
        with VerticalScroll(classes="approval-detail"):
            yield Static(detail)
        with Horizontal(classes="approval-buttons"):
            yield Button("Approve (y)", id="approve", variant="success", compact=True)
            yield Button("Always (a)", id="always", variant="primary", compact=True)
            yield Button("Deny (n)", id="deny", variant="error", compact=True)

    def on_mount(self) -> None:
        self.post_message(self.Shown(self))

    def on_focus(self) -> None:
        self._typing = False

    def on_key(self, event: events.Key) -> None:
        # Runs before the bindings. Once the user types text, the keys that still
        # reach the card before the prompt has the focus are text too, not answers.
        if (
            not event.is_printable
            or not event.character
            or (event.key in self.ANSWER_KEYS and not self._typing)
        ):
            return  # the bindings (and the app's keys) handle it
        self._typing = True
        event.stop()
        event.prevent_default()
        self.post_message(self.Typing(self, event.character))

    def _answer(self, approved: bool, *, always: bool = False) -> None:
        if self._answered:
            return
        self._answered = True
        reason = "" if approved else "the user denied this; ask what to do instead"
        decision = ApprovalDecision(approved=approved, always=always, reason=reason)
        self.post_message(self.Decided(self, decision))

    def action_approve(self) -> None:
        self._answer(True)

    def action_always(self) -> None:
        self._answer(True, always=True)

    def action_deny(self) -> None:
        self._answer(False)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        {"approve": self.action_approve, "always": self.action_always, "deny": self.action_deny}[
            event.button.id or "deny"
        ]()


class ApprovalStack(Vertical):
    """The pending approval cards, oldest first; hidden while empty.

    A card's answer is given to its request here and the card removed; the
    :class:`ApprovalCard.Decided` message then bubbles on to the screen.
    """

    def on_mount(self) -> None:
        self.display = False

    async def add(self, request: ApprovalRequested) -> None:
        await self.mount(ApprovalCard(request))
        self.display = True

    def pending(self) -> ApprovalCard | None:
        """The oldest card still waiting for an answer."""
        cards = list(self.query(ApprovalCard))
        return cards[0] if cards else None

    def drop_all(self) -> None:
        """Deny every waiting request (its turn has ended) and remove the cards."""
        for card in self.query(ApprovalCard):
            card.request.respond(False)
            card.remove()
        self.display = False

    def on_approval_card_decided(self, event: ApprovalCard.Decided) -> None:
        event.card.request.respond(event.decision)
        event.card.remove()
        self.display = len(self.query(ApprovalCard)) > 1  # the removed one still counts
