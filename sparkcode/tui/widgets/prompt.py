"""The prompt: a multi-line editor with history, slash commands, ``@path`` completion
and pastes kept whole (long ones folded into a chip)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from textual import events
from textual.binding import BindingType
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import TextArea

from ..attach import pasted_image
from ..completion import WorkspaceFiles, suggest_completion, unique_command
from ..keys import bindings
from ..paste import (
    CHIP,
    CHIP_MIN_LINES,
    PasteRefused,
    chip_label,
    clean_paste,
    expand_chips,
    line_count,
)

HISTORY_LIMIT = 500
"""Prompts remembered for Up/Down."""


class PromptInput(TextArea):
    """Where the user types.

    Enter sends; Shift+Enter or Ctrl+J starts a new line. Up on the first line and
    Down on the last walk earlier prompts; Tab accepts the completion shown. A paste
    keeps every line; one of :data:`~sparkcode.tui.paste.CHIP_MIN_LINES` lines or
    more shows as ``[pasted N lines #K]`` (Ctrl+O unfolds and folds it again) and
    is sent whole.
    """

    DEFAULT_CSS = """
    PromptInput {
        height: auto;
        min-height: 3;
        max-height: 14;
        border: tall $primary-muted;
        padding: 0 1;
        &:focus { border: tall $primary; }
        & .text-area--cursor-line { background: transparent; }
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = bindings("prompt")

    PLACEHOLDER = "Ask, or /help for commands, @ to mention a file (Shift+Enter: new line)"
    PLAN_PLACEHOLDER = "Plan mode: only read-only tools run. Describe the change; /act approves"
    NEWLINE_KEYS = frozenset({"shift+enter", "ctrl+j"})
    """Keys that insert a line break (Ctrl+J where the terminal reports no Shift)."""

    expanded: reactive[bool] = reactive(False)
    """The folded pastes are shown whole in the editor (Ctrl+O toggles)."""

    class Submitted(Message):
        """Enter was pressed: ``text`` is what to send, chips expanded.

        Blank space around the typed text is trimmed before the chips are
        expanded, so a paste is sent byte for byte, its last line break too."""

        def __init__(self, prompt: PromptInput, text: str, shown: str) -> None:
            super().__init__()
            self.prompt = prompt
            self.text = text
            """The message, every paste whole."""
            self.shown = shown
            """The prompt as it was drawn (chips folded), what the history keeps."""

        @property
        def control(self) -> PromptInput:
            return self.prompt

    class PasteNote(Message):
        """A paste was cleaned or refused; ``refused`` when nothing was inserted."""

        def __init__(self, text: str, *, refused: bool) -> None:
            super().__init__()
            self.text = text
            self.refused = refused

    class ImagePasted(Message):
        """The paste was exactly the path of an image file: attach it (not inserted)."""

        def __init__(self, path: Path, text: str) -> None:
            super().__init__()
            self.path = path
            self.text = text
            """The paste as it came (typed into the prompt if the image is refused)."""

    def __init__(self, files: WorkspaceFiles, *, id: str | None = None) -> None:
        super().__init__(
            id=id,
            soft_wrap=True,
            tab_behavior="focus",
            show_line_numbers=False,
            highlight_cursor_line=False,
            placeholder=self.PLACEHOLDER,
        )
        self.files = files
        """The workspace files ``@`` completes from."""
        self.prompt_history: list[str] = []
        """Earlier prompts as shown (chips folded), oldest first."""
        self.pastes: dict[int, str] = {}
        """Every folded paste of the session by chip number (history recalls chips)."""
        self._position: int | None = None
        self._draft = ""

    # -- the text ----------------------------------------------------------------------

    @property
    def value(self) -> str:
        """The text as drawn (chips folded); setting it puts the cursor at the end."""
        return self.text

    @value.setter
    def value(self, text: str) -> None:
        self.expanded = False
        self.load_text(text)
        self.move_cursor(self.document.end)

    @property
    def message(self) -> str:
        """What Enter would send: the text with every paste whole."""
        return expand_chips(self.text, self.pastes)

    def show_mode(self, mode: str) -> None:
        """Say in the empty prompt when plan mode is on."""
        self.placeholder = self.PLAN_PLACEHOLDER if mode == "plan" else self.PLACEHOLDER

    def set_files(self, files: WorkspaceFiles) -> None:
        """Complete from another workspace (a resumed session of another directory)."""
        self.files = files
        self.update_suggestion()

    def remember(self, text: str) -> None:
        """Add a sent prompt to the history (consecutive duplicates kept once)."""
        if text and (not self.prompt_history or self.prompt_history[-1] != text):
            self.prompt_history.append(text)
            del self.prompt_history[:-HISTORY_LIMIT]
        self._position = None
        self._draft = ""

    # -- keys ---------------------------------------------------------------------------

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            self.action_submit()
        elif event.key in self.NEWLINE_KEYS:
            event.stop()
            event.prevent_default()
            self.insert("\n")

    def action_submit(self) -> None:
        """Post :class:`Submitted` with the prompt's text (the screen clears it); an
        abbreviated slash command that only one completes is sent completed."""
        shown = self.text.strip()
        shown = unique_command(shown) or shown
        self.post_message(self.Submitted(self, expand_chips(shown, self.pastes), shown))

    def action_cursor_up(self, select: bool = False) -> None:
        if not select and self._visual_row() == 0:
            self.action_history(-1)
        else:
            super().action_cursor_up(select)

    def action_cursor_down(self, select: bool = False) -> None:
        if not select and self._visual_row() == self.wrapped_document.height - 1:
            self.action_history(1)
        else:
            super().action_cursor_down(select)

    def _visual_row(self) -> int:
        return self.wrapped_document.location_to_offset(self.cursor_location).y

    def action_history(self, step: int) -> None:
        """Show the previous (-1) or next (+1) prompt from the history."""
        if not self.prompt_history:
            return
        if self._position is None:
            if step > 0:
                return
            self._draft = self.text
            position = len(self.prompt_history) - 1
        else:
            position = self._position + step
        position = max(position, 0)
        if position >= len(self.prompt_history):
            self._position = None
            self.value = self._draft
        else:
            self._position = position
            self.value = self.prompt_history[position]

    def update_suggestion(self) -> None:
        """Offer the rest of a command or ``@path`` while the cursor is at the end."""
        suggestion = ""
        if self.selection.is_empty and self.cursor_location == self.document.end:
            text = self.text
            found = suggest_completion(text, self.files)
            if found is not None and found.startswith(text):
                suggestion = found[len(text) :]
        self.suggestion = suggestion

    def action_complete(self) -> None:
        """Accept the shown completion, or move focus on when there is none."""
        if self.suggestion:
            self.insert(self.suggestion)
        else:
            self.screen.focus_next()

    def action_delete_left(self) -> None:
        """Backspace right after a chip removes the whole chip (its paste with it)."""
        row, column = self.cursor_location
        if self.selection.is_empty:
            before = self.document[row][:column]
            for match in CHIP.finditer(before):
                if match.end() == column:
                    self.delete((row, match.start()), (row, column))
                    return
        super().action_delete_left()

    # -- pastes -------------------------------------------------------------------------

    async def _on_paste(self, event: events.Paste) -> None:
        event.stop()
        event.prevent_default()  # TextArea's own handler would insert the raw text
        if self.read_only:
            return
        image = pasted_image(event.text, self.files.root)
        if image is not None:
            self.post_message(self.ImagePasted(image, event.text.strip()))
            return
        try:
            paste = clean_paste(event.text)
        except PasteRefused as refused:
            self.post_message(self.PasteNote(str(refused), refused=True))
            return
        if paste.note is not None:
            self.post_message(self.PasteNote(paste.note, refused=False))
        text = paste.text
        if paste.lines >= CHIP_MIN_LINES:
            number = max(self.pastes, default=0) + 1
            self.pastes[number] = text
            text = chip_label(paste.lines, number)
        self.insert(text)
        self.focus()

    def action_toggle_pastes(self) -> None:
        """Unfold every chip into its text, or fold unfolded pastes back into chips."""
        text = self.text
        if CHIP.search(text):
            self.value = expand_chips(text, self.pastes)
            self.expanded = True
            return
        folded = text
        for number, paste in self.pastes.items():
            if paste in folded:
                folded = folded.replace(paste, chip_label(line_count(paste), number), 1)
        self.expanded = False
        if folded != text:
            self.value = folded
