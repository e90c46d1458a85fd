"""The conversation pane: a scrolling column of turns that follows the stream."""

from __future__ import annotations

from typing import Any

from textual.containers import VerticalScroll
from textual.geometry import Size
from textual.widget import Widget

from .chat import AssistantMessage, ErrorMessage, Notice, ThinkingBlock, UserMessage
from .tool_card import ToolCard


class Conversation(VerticalScroll, can_focus=True):
    """Holds the blocks of the conversation and knows which ones are streaming.

    A turn is a prompt followed by one or more model requests; each request
    may think, answer and call tools. A new thinking block or answer starts
    whenever the previous one was interrupted by a tool call.
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._thinking: ThinkingBlock | None = None
        self._answer: AssistantMessage | None = None
        self._cards: dict[str, ToolCard] = {}

    def on_mount(self) -> None:
        self.anchor()

    def _size_updated(
        self, size: Size, virtual_size: Size, container_size: Size, layout: bool = True
    ) -> bool:
        # A growing answer grows this container's virtual size in the layout pass
        # that places it; Textual's reactive would then lay the screen out once
        # more (6 ms a flush in bench/targets/tui_cpu.py). The scroll bars still follow:
        # ``_scroll_update`` sets them, and a bar that appears asks for its own
        # layout pass.
        return super()._size_updated(size, virtual_size, container_size, layout=False)

    async def _add(self, widget: Widget) -> None:
        await self.mount(widget)

    async def add_user(self, text: str) -> UserMessage:
        await self.end_segment()
        widget = UserMessage(text)
        await self._add(widget)
        return widget

    async def add_notice(self, text: str, *, markup: bool = False) -> Notice:
        widget = Notice(text, markup=markup)
        await self._add(widget)
        return widget

    async def add_error(self, text: str) -> ErrorMessage:
        await self.end_segment()
        widget = ErrorMessage(text)
        await self._add(widget)
        return widget

    async def thinking(self, budget: int | None) -> ThinkingBlock:
        """The thinking block of the current request, created on first use."""
        if self._thinking is None or self._thinking.done:
            self._thinking = ThinkingBlock(budget)
            await self._add(self._thinking)
        return self._thinking

    @property
    def current_thinking(self) -> ThinkingBlock | None:
        return self._thinking

    @property
    def current_answer(self) -> AssistantMessage | None:
        """The answer streaming now, if one started."""
        return self._answer

    async def answer(self) -> AssistantMessage:
        """The answer of the current request, created on first use."""
        if self._answer is None:
            if self._thinking is not None and not self._thinking.done:
                await self._thinking.finish()
            self._answer = AssistantMessage()
            await self._add(self._answer)
        return self._answer

    async def add_tool_card(
        self, call_id: str, tool: str, arguments: dict[str, Any] | str, *, diff: str | None = None
    ) -> ToolCard:
        await self.end_segment()
        card = ToolCard(call_id, tool, arguments, diff=diff)
        self._cards[call_id] = card
        await self._add(card)
        return card

    def tool_card(self, call_id: str) -> ToolCard | None:
        return self._cards.get(call_id)

    async def end_segment(self) -> None:
        """Finish the streaming blocks; the next text starts new ones."""
        if self._thinking is not None and not self._thinking.done:
            await self._thinking.finish()
        if self._answer is not None:
            await self._answer.finish()
        self._thinking = None
        self._answer = None

    async def clear(self) -> None:
        await self.end_segment()
        self._cards.clear()
        await self.remove_children()
