"""The sessions screen: recorded sessions, their latest replay results, playback.

Opened with ``/sessions`` (or the palette). Enter plays the highlighted session
back, ``c`` continues it (the screen is dismissed with its ID and the main
screen resumes it); the panel below the table shows what the last ``sparkcode replay
--rerun`` / ``--profile`` found for it (turns that diverge or trip the
detector, per engine configuration).
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from engine.errors import UserError
from sparkcode.replay import details, table
from sparkcode.sessions import SessionStore, SessionSummary

from .replay import ReplayScreen


def result_summary(result: dict[str, object] | None) -> str:
    """One cell: how many turns each configuration flagged in the last replay."""
    if not result:
        return "-"
    parts: list[str] = []
    runs = result.get("runs")
    for run in runs if isinstance(runs, list) else []:
        turns = run.get("turns", [])
        flagged = [t["turn"] for t in turns if t.get("flagged")]
        label = run.get("target", "?")
        parts.append(f"{label}: " + (f"turns {flagged} flagged" if flagged else "all identical"))
    return "; ".join(parts) or "-"


class SessionsScreen(Screen[str | None]):
    """Browse recorded sessions and the results of replaying them."""

    CSS_PATH = "sessions.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Back"),
        Binding("enter", "play", "Play"),
        Binding("f", "play_fast", "Play 8x"),
        Binding("c", "resume", "Continue"),
        Binding("r", "refresh", "Refresh"),
    ]

    def __init__(self, store: SessionStore) -> None:
        super().__init__()
        self.store = store
        self.rows: list[SessionSummary] = []

    def compose(self) -> ComposeResult:
        yield Static(
            "Recorded sessions (enter: play, f: play 8x, c: continue, r: refresh)",
            id="sessions-title",
        )
        yield DataTable(id="sessions-table", cursor_type="row", zebra_stripes=True)
        with VerticalScroll(id="sessions-detail"):
            yield Static("", id="sessions-result")
        yield Footer()

    def on_mount(self) -> None:
        grid = self.query_one(DataTable)
        grid.add_columns(
            "ID", "created", "requests", "tokens", "engine / model", "worktree", "last replay"
        )
        self.action_refresh()
        grid.focus()

    def action_refresh(self) -> None:
        grid = self.query_one(DataTable)
        grid.clear()
        self.rows = list(reversed(self.store.summaries()))  # newest first
        for row in self.rows:
            damaged = " !" if row.problems or row.truncated else ""
            grid.add_row(
                row.id + damaged,
                row.created,
                str(row.requests),
                str(row.completion_tokens),
                f"{row.engine} / {row.model or '?'}",
                row.branch or "-",
                result_summary(self.store.load_result(row.id)),
                key=row.id,
            )
        if not self.rows:
            self.query_one("#sessions-result", Static).update(
                f"no sessions recorded yet in {self.store.directory}"
            )
        else:
            self._show(self.rows[0].id)

    def _selected(self) -> str | None:
        grid = self.query_one(DataTable)
        if not self.rows or grid.cursor_row < 0 or grid.cursor_row >= len(self.rows):
            return None
        return self.rows[grid.cursor_row].id

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value is not None:
            self._show(event.row_key.value)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self._play(1.0)

    def _show(self, session_id: str) -> None:
        result = self.store.load_result(session_id)
        widget = self.query_one("#sessions-result", Static)
        row = next((r for r in self.rows if r.id == session_id), None)
        where = (
            f"\nworktree {row.worktree} (branch {row.branch or '?'})"
            if row is not None and row.worktree
            else ""
        )
        if result is None:
            widget.update(
                f"session {session_id}: not replayed yet "
                f"(sparkcode replay {session_id} --rerun){where}"
            )
            return
        text = table(result)
        more = details(result)
        widget.update(
            f"session {session_id}, replayed {result.get('at', '')}{where}\n\n{text}"
            + (f"\n\n{more}" if more else "")
        )

    def _play(self, speed: float) -> None:
        session_id = self._selected()
        if session_id is None:
            return
        try:
            session = self.store.load(session_id)
        except UserError as exc:  # removed or unreadable since the list was read
            self.notify(str(exc), severity="error")
            return
        self.app.push_screen(ReplayScreen(session, speed=speed))

    def action_play(self) -> None:
        self._play(1.0)

    def action_play_fast(self) -> None:
        self._play(8.0)

    def action_resume(self) -> None:
        session_id = self._selected()
        if session_id is not None:
            self.dismiss(session_id)

    def action_close(self) -> None:
        self.dismiss(None)
