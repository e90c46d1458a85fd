"""The blocks a conversation is made of: prompts, answers, thinking, notices, errors."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.content import Content
from textual.css.query import NoMatches
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Button, Collapsible, Static
from textual.widgets.collapsible import CollapsibleTitle

from .markdown_lines import MarkdownLines
from .stream_buffer import StreamBuffer, update_streamed


class UserMessage(Static):
    """What the user typed."""

    def __init__(self, text: str) -> None:
        super().__init__(Text(text), classes="user-message")
        self.text = text
        """The prompt as sent."""


class Notice(Static):
    """A line from sparkcode itself (help, command results, what just happened)."""

    def __init__(self, text: str, *, markup: bool = False) -> None:
        super().__init__(text if markup else Text(text), classes="notice")


class ErrorMessage(Static):
    """An error, shown inline where it happened."""

    def __init__(self, text: str) -> None:
        super().__init__(Text(text), classes="error-message")
        self.text = text
        """The error text."""


def split_finished(markdown: str) -> tuple[str, str]:
    """Split streamed markdown into finished blocks and the unfinished tail.

    A block is finished at a blank line outside a code fence: nothing after it
    can change how it renders (setext headings and lazy continuations need no
    blank line, so they stay in the tail until one comes).
    """
    fence: str | None = None
    cut = 0
    offset = 0
    for line in markdown.splitlines(keepends=True):
        offset += len(line)
        stripped = line.strip()
        marker = stripped[:3]
        if marker in ("```", "~~~"):
            if fence is None:
                fence = marker
            elif marker == fence and stripped.strip(marker[0]) == "":
                fence = None
        elif fence is None and not stripped and line.endswith("\n"):
            cut = offset
    return markdown[:cut], markdown[cut:]


class AssistantMessage(MarkdownLines):
    """The assistant's answer, rendered as markdown while it streams.

    Streamed text is rendered on the buffer's flush ticks; finished blocks are
    rendered once and only the unfinished tail again, all in this one widget.
    (Textual's ``Markdown`` widget builds a widget tree per block and re-parses
    the open block on every append: about a quarter of a core at 100 tok/s on
    a 2-core laptop, against the TUI's budget of a fifth for everything.)
    """

    def __init__(self) -> None:
        super().__init__(classes="assistant-message")
        self._text: list[str] = []
        self._buffer = StreamBuffer(self, self._render_pending)

    @property
    def text(self) -> str:
        """Everything streamed so far, rendered or not."""
        return "".join(self._text)

    def append_text(self, delta: str) -> None:
        """Add a streamed fragment; it renders on the next flush."""
        self._text.append(delta)
        self._buffer.write(delta)

    def _render_pending(self, fragment: str) -> None:
        done, tail = split_finished(self.tail + fragment)
        self.show(done, tail)

    async def finish(self) -> None:
        """Render whatever is still pending."""
        await self._buffer.flush()


LIVE_THINKING_LINES = 14
"""Lines of a streaming thinking block that are rendered (the block shows 12)."""


class _ThinkingText(Static):
    """The streamed reasoning inside a thinking block."""


class ThinkingBlock(Collapsible):
    """The model's reasoning, streamed live, headed ``thinking: used / budget``."""

    used: reactive[int] = reactive(0)
    """Reasoning tokens so far."""
    budget: reactive[int | None] = reactive(None)
    """The thinking token budget the request carried."""
    note: reactive[str] = reactive("")
    """What happened to the thinking (for example: the budget was passed)."""
    done: reactive[bool] = reactive(False)
    """True once the model stopped thinking."""

    def __init__(self, budget: int | None) -> None:
        self._body = _ThinkingText("", classes="thinking-text")
        super().__init__(self._body, title="thinking", collapsed=False, classes="thinking")
        self._chunks: list[str] = []
        self._tokens = 0
        self._buffer = StreamBuffer(self, self._render_text)
        self.set_reactive(ThinkingBlock.budget, budget)

    def on_mount(self) -> None:
        self._update_title()

    @property
    def text(self) -> str:
        return "".join(self._chunks)

    def append_text(self, delta: str, tokens: int | None = None) -> None:
        """Add streamed reasoning; ``tokens`` is the running reasoning-token count.

        The count is shown with the text, on the buffer's next flush.
        """
        self._chunks.append(delta)
        if tokens is not None:
            self._tokens = max(self._tokens, tokens)
        self._buffer.write(delta)

    def count_tokens(self, tokens: int) -> None:
        """The server's reasoning-token count; shown on the next flush (or now, when done)."""
        self._tokens = max(self._tokens, tokens)
        if self.done:
            self.used = self._tokens

    def _render_text(self, _: str) -> None:
        # While it streams only the end fits the block and matters: render
        # that (long thinking would otherwise be re-wrapped whole every tick)
        # and keep it scrolled to the newest line.
        text = self.text
        keep = LIVE_THINKING_LINES * max(self.size.width, 40)
        if not self.done and len(text) > keep:
            text = "…" + text[-keep:]
        update_streamed(self._body, Text(text))
        self.used = max(self.used, self._tokens)
        self.query_one(Collapsible.Contents).scroll_end(animate=False, immediate=False)

    async def finish(self, *, collapse: bool = True) -> None:
        await self._buffer.flush()
        self._body.update(Text(self.text))
        self.used = max(self.used, self._tokens)
        self.done = True
        if collapse:
            self.collapsed = True

    def _update_title(self) -> None:
        budget = "?" if self.budget is None else str(self.budget)
        title = f"thinking: {self.used} / {budget} tokens"
        if self.note:
            title += f" · {self.note}"
        try:
            header = self.query_one(CollapsibleTitle)
        except NoMatches:
            header = None
        resized = Content(title).cell_length != Content(self.title).cell_length
        if header is None or not header.size or resized:
            self.title = title
            return
        # Same width: repaint the header alone. Setting ``title`` lays the whole
        # screen out, and the count changes on every flush while thinking streams.
        self.set_reactive(Collapsible.title, title)
        header.set_reactive(CollapsibleTitle.label, Content(title))
        symbol = header.collapsed_symbol if header.collapsed else header.expanded_symbol
        header.update(Content.assemble(symbol, " ", title), layout=False)

    def watch_used(self) -> None:
        self._update_title()

    def watch_budget(self) -> None:
        self._update_title()

    def watch_note(self) -> None:
        self._update_title()


class DegenerationWarning(Horizontal):
    """The streamed answer looks degenerate; offers to stop the turn."""

    class StopRequested(Message):
        """The user chose to stop the degenerate turn."""

    def __init__(self, pattern: str, detail: str, *, stopped: bool = False) -> None:
        super().__init__(classes="degeneration")
        self.stopped = stopped
        """The agent already stopped the stream: no button."""
        self.pattern = pattern
        """The detector's check that fired."""
        self.detail = detail
        """What it saw, in one sentence."""

    def compose(self) -> ComposeResult:
        yield Static(
            Text(f"⚠ degenerate output ({self.pattern}): {self.detail}"),
            classes="degeneration-text",
        )
        if not self.stopped:
            yield Button("Stop turn", id="stop-degenerate", variant="warning", compact=True)

    @on(Button.Pressed, "#stop-degenerate")
    def _stop(self, event: Button.Pressed) -> None:
        event.stop()
        event.button.disabled = True
        self.post_message(self.StopRequested())
