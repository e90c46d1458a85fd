"""The prompt: an input with history, slash commands and ``@path`` completion."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.widgets import Input

from ..completion import PromptSuggester, WorkspaceFiles

HISTORY_LIMIT = 500
"""Prompts remembered for Up/Down."""


class PromptInput(Input):
    """Where the user types; Up/Down walk earlier prompts, Tab completes."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "history(-1)", "Previous prompt", show=False),
        Binding("down", "history(1)", "Next prompt", show=False),
        Binding("tab", "complete", "Complete", show=False),
    ]

    PLACEHOLDER = "Ask, or /help for commands, @ to mention a file"
    PLAN_PLACEHOLDER = "Plan mode: only read-only tools run. Describe the change; /act approves"

    def __init__(self, files: WorkspaceFiles, *, id: str | None = None) -> None:
        super().__init__(
            placeholder=self.PLACEHOLDER,
            suggester=PromptSuggester(files), id=id,
            # Focus comes back after an approval or a typed key on a card: selecting
            # the draft then would let the next key replace it.
            select_on_focus=False,
        )
        self.files = files
        """The workspace files ``@`` completes from."""
        self.history: list[str] = []
        """Earlier prompts, oldest first."""
        self._position: int | None = None
        self._draft = ""

    def show_mode(self, mode: str) -> None:
        """Say in the empty prompt when plan mode is on."""
        self.placeholder = self.PLAN_PLACEHOLDER if mode == "plan" else self.PLACEHOLDER

    def set_files(self, files: WorkspaceFiles) -> None:
        """Complete from another workspace (a resumed session of another directory)."""
        self.files = files
        self.suggester = PromptSuggester(files)

    def remember(self, text: str) -> None:
        """Add a sent prompt to the history (consecutive duplicates kept once)."""
        if text and (not self.history or self.history[-1] != text):
            self.history.append(text)
            del self.history[:-HISTORY_LIMIT]
        self._position = None
        self._draft = ""

    def action_history(self, step: int) -> None:
        """Show the previous (-1) or next (+1) prompt from the history."""
        if not self.history:
            return
        if self._position is None:
            if step > 0:
                return
            self._draft = self.value
            position = len(self.history) - 1
        else:
            position = self._position + step
        if position < 0:
            position = 0
        if position >= len(self.history):
            self._position = None
            self.value = self._draft
        else:
            self._position = position
            self.value = self.history[position]
        self.cursor_position = len(self.value)

    def action_complete(self) -> None:
        """Accept the shown completion, or move focus on when there is none."""
        if self._suggestion and len(self._suggestion) > len(self.value):
            self.value = self._suggestion
            self.cursor_position = len(self.value)
        else:
            self.screen.focus_next()
