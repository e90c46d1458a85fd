"""The status bar: live engine figures and a sparkline of decode speed."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.reactive import reactive
from textual.widgets import Sparkline, Static

from ..stats import LiveStats, format_stats


class StatusBar(Horizontal):
    """Decode and prefill tok/s, TTFT, acceptance, cache and context, live."""

    stats: reactive[LiveStats] = reactive(LiveStats, always_update=True)
    """The figures shown; assign a new snapshot to redraw."""

    def compose(self) -> ComposeResult:
        yield Static("", id="status-figures")
        yield Sparkline([], id="decode-sparkline")

    def on_mount(self) -> None:
        self.watch_stats(self.stats)

    def watch_stats(self, stats: LiveStats) -> None:
        figures = self.query_one("#status-figures", Static)
        figures.update(format_stats(stats))
        figures.set_class(stats.streaming, "-streaming")
        self.query_one(Sparkline).data = list(stats.decode_history)
