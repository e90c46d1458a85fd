"""Streamed markdown drawn from cached lines: finished blocks render once, the open one per flush.

One widget holds a whole answer, however long: it does not mount a widget per
block (each one more for every layout pass to arrange and every repaint to cut),
and when a flush leaves its height unchanged it repaints only the lines that
changed instead of laying the screen out again.
"""

from __future__ import annotations

from markdown_it import MarkdownIt
from rich.markdown import Markdown as RichMarkdown
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.visual import Visual, visualize
from textual.widget import Widget

CODE_THEME = "ansi_dark"
"""Pygments theme of code blocks (ANSI colours follow the terminal's palette)."""


class _Markdown(RichMarkdown):
    """Rich's ``Markdown``, parsed by one shared parser.

    Rich builds a ``MarkdownIt`` per instance, compiling linkify's regular
    expressions each time: more than the parse of a streamed tail costs.
    """

    _parser = MarkdownIt().enable("strikethrough").enable("table")

    def __init__(self, markup: str) -> None:
        # Set what RichMarkdown.__init__ sets (tests/sparkcode/tui/test_markdown_lines.py checks
        # the two still render alike), but parse with the shared parser.
        self.markup = markup
        self.parsed = self._parser.parse(markup)
        self.code_theme = CODE_THEME
        self.justify = None
        self.style = "none"
        self.hyperlinks = False
        self.inline_code_lexer = None
        self.inline_code_theme = CODE_THEME


def _lead_after(block: str) -> str:
    """One element that ends like ``block`` does, for what rich puts after it.

    A horizontal rule draws its own blank line and asks for none after it;
    every other element asks for one.
    """
    last = [token for token in _Markdown._parser.parse(block) if token.level == 0][-1:]
    return "---\n\n" if last and last[0].type == "hr" else "x\n\n"


def render_markdown(markdown: str) -> RichMarkdown:
    """The renderable the conversation shows ``markdown`` with."""
    return _Markdown(markdown)


class MarkdownLines(Widget):
    """Markdown made of finished blocks and an open tail, drawn line by line.

    Each finished block is rendered once (again only when the width or the
    styles change); the tail is rendered again on every :meth:`show`.
    """

    DEFAULT_CSS = """
    MarkdownLines {
        height: auto;
    }
    """

    def __init__(self, *, classes: str | None = None) -> None:
        super().__init__(classes=classes)
        self._blocks: list[str] = []
        self._leads: list[str] = []
        """Per block: what stands in for the blocks before it (see ``_lead_after``)."""
        self._after = ""
        """The lead of the block after the last finished one ("" before the first)."""
        self._skip: dict[tuple[str, int], int] = {}
        """Lines of a lead rendered alone, by lead and width."""
        self._tail = ""
        self._width = 0
        """The width ``_lines`` and ``_tail_lines`` were rendered at; 0: not rendered."""
        self._lines: list[Strip] = []
        self._tail_lines: list[Strip] = []

    @property
    def tail(self) -> str:
        """The open block: shown, but rendered again on the next :meth:`show`."""
        return self._tail

    @property
    def source(self) -> str:
        """The markdown shown (finished blocks and the tail)."""
        return "".join(self._blocks) + self._tail

    def show(self, finished: str, tail: str) -> None:
        """Append ``finished`` to the finished blocks and replace the tail with ``tail``."""
        if finished:
            self._leads.append(self._after)
            self._blocks.append(finished)
            if finished.strip():
                self._after = _lead_after(finished)
        self._tail = tail
        width, height = self.size
        if not self._width or width != self._width:
            self._width = 0  # re-rendered at the width the next layout gives
            self.refresh(layout=True)
            return
        first = len(self._lines)
        if finished:
            self._lines.extend(self._render_block(finished, self._leads[-1], width))
        self._tail_lines = self._render_block(tail, self._after, width)
        lines = len(self._lines) + len(self._tail_lines)
        if lines != height:
            self.refresh(layout=True)
        else:
            self.refresh(Region(0, first, width, lines - first))

    def _render_block(self, markdown: str, lead: str, width: int) -> list[Strip]:
        """``markdown``'s lines as they are in the whole text, after blocks ending like ``lead``.

        Rich puts a blank line between two elements, not before the first: a
        block rendered alone would lose it. Rendering it after a one-element
        stand-in for what came before, then dropping the stand-in's lines, keeps
        the answer as it renders whole, however the stream was cut into flushes.
        """
        if not markdown.strip():
            return []
        skip = self._skip.get((lead, width)) if lead else 0
        if skip is None:
            skip = self._skip[lead, width] = len(self._strips(lead, width))
        return self._strips(lead + markdown, width)[skip:]

    def _strips(self, markdown: str, width: int) -> list[Strip]:
        visual = visualize(self, render_markdown(markdown))
        return Visual.to_strips(self, visual, width, None, self.visual_style)

    def _ensure(self, width: int) -> None:
        if width != self._width:
            self._lines = [
                line
                for block, lead in zip(self._blocks, self._leads, strict=True)
                for line in self._render_block(block, lead, width)
            ]
            self._tail_lines = self._render_block(self._tail, self._after, width)
            self._width = width

    def _size_updated(
        self, size: Size, virtual_size: Size, container_size: Size, layout: bool = True
    ) -> bool:
        # Textual sets ``virtual_size`` as a reactive that asks for another layout
        # pass: for a widget that does not scroll, the pass that just placed it
        # already knew that size. Without this every flush that grows an answer
        # laid the screen out twice (10 ms each on a 2-core laptop, see
        # bench/targets/tui_cpu.py).
        return super()._size_updated(size, virtual_size, container_size, layout=False)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if not width:
            return 0
        self._ensure(width)
        return len(self._lines) + len(self._tail_lines)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        self._ensure(width)
        frozen = len(self._lines)
        if y < frozen:
            return self._lines[y]
        if y - frozen < len(self._tail_lines):
            return self._tail_lines[y - frozen]
        return Strip.blank(width, self.visual_style.rich_style)

    def notify_style_update(self) -> None:
        # The cached lines carry the old colours.
        self._width = 0
        self._skip.clear()
        super().notify_style_update()

    def render(self) -> RichMarkdown:
        # Only Textual's selection lookup asks for this (drawing goes through render_line).
        return render_markdown(self.source)
