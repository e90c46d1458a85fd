"""The status bar: live engine figures and a sparkline of decode speed."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.reactive import var
from textual.timer import Timer
from textual.widgets import Sparkline, Static

from ..stats import LiveStats, format_stats
from .stream_buffer import FLUSH_INTERVAL_S, aligned_delay


class StatusBar(Horizontal):
    """Decode and prefill tok/s, TTFT, acceptance, cache and context, live.

    Usage reports arrive ten times a second while streaming; the bar redraws
    at most every ``REDRAW_S`` (figures changing faster cannot be read), and
    at once when a stream starts or ends.
    """

    REDRAW_S = 2 * FLUSH_INTERVAL_S
    """On every other text flush tick, so both share one screen update."""

    WAIT_TICK_S = 0.5
    """How often the wait for a first token is redrawn."""

    stats: var[LiveStats] = var(LiveStats, always_update=True)
    """The figures shown; assign a new snapshot to redraw (a ``var``: the bar
    repaints on its own schedule, not on every assignment)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._shown: LiveStats | None = None
        self._timer: Timer | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="status-figures")
        yield Sparkline([], id="decode-sparkline")

    def on_mount(self) -> None:
        self._draw()

    def watch_stats(self, stats: LiveStats) -> None:
        if not self.is_mounted:
            return
        if (
            self._shown is None
            or stats.streaming != self._shown.streaming
            or (stats.waiting_since is None) != (self._shown.waiting_since is None)
        ):
            self._draw()
        elif self._timer is None:
            self._timer = self.set_timer(aligned_delay(self.REDRAW_S), self._draw)

    def _draw(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        stats = self.stats
        self._shown = stats
        figures = self.query_one("#status-figures", Static)
        # One line of fixed height: no layout pass needed (it would relayout the screen).
        figures.update(format_stats(stats), layout=False)
        figures.set_class(stats.streaming, "-streaming")
        self.query_one(Sparkline).data = list(stats.decode_history)
        if stats.waiting_since is not None and self._timer is None:
            # No events arrive while the engine prefills: tick the wait on our own.
            self._timer = self.set_timer(self.WAIT_TICK_S, self._draw)
