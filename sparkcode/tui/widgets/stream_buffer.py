"""Coalesces streamed text so a widget re-renders ten times a second, not per token.

At 100 tok/s, re-parsing markdown on every delta costs far more CPU than the
user can see; flushing on a timer keeps the rendering cost flat.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from textual.timer import Timer
from textual.visual import VisualType
from textual.widget import Widget
from textual.widgets import Static

FLUSH_INTERVAL_S = 0.1
"""How often pending text is rendered while a stream is running (its latency on screen)."""


def aligned_delay(interval: float) -> float:
    """Seconds to the next multiple of ``interval`` on the monotonic clock.

    Every buffer (and the status bar) flushing on the same ticks lets Textual
    lay the screen out and paint once per tick instead of once per widget.
    """
    return interval - (time.monotonic() % interval)


def update_streamed(widget: Static, content: VisualType) -> None:
    """Show ``content`` in ``widget``; lay the screen out only if its height changes.

    A layout pass arranges and repaints the whole screen (and Textual follows a
    scroll container's growth with a second pass): about 10 ms each on a 2-core
    laptop. Most flushes of a stream only extend the last line, which a repaint
    of the widget alone shows.
    """
    width, height = widget.size
    if not width or not widget.display:
        widget.update(content)  # not laid out yet: its height is unknown
        return
    widget.update(content, layout=False)
    # Cached by width, so the layout pass this may trigger does not measure again.
    if widget.get_content_height(widget.size, widget.app.size, width) != height:
        widget.refresh(layout=True)


class StreamBuffer:
    """Collects text fragments and hands them to ``sink`` at most every interval."""

    def __init__(
        self,
        owner: Widget,
        sink: Callable[[str], Awaitable[None] | None],
        interval: float = FLUSH_INTERVAL_S,
    ) -> None:
        self._owner = owner
        self._sink = sink
        self._interval = interval
        self._pending: list[str] = []
        self._timer: Timer | None = None

    @property
    def pending(self) -> str:
        return "".join(self._pending)

    def write(self, fragment: str) -> None:
        """Queue ``fragment``; the next tick renders it."""
        if not fragment:
            return
        self._pending.append(fragment)
        if self._timer is None:
            self._timer = self._owner.set_timer(aligned_delay(self._interval), self._tick)

    async def _tick(self) -> None:
        self._timer = None
        await self.flush()

    async def flush(self) -> None:
        """Render everything pending now."""
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        if not self._pending:
            return
        text = "".join(self._pending)
        self._pending.clear()
        result = self._sink(text)
        if result is not None:
            await result
