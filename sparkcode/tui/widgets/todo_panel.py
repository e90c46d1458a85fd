"""The todo panel: the agent's todo list, redrawn whenever it changes."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from sparkcode.agent.core.events import TodoItem

_MARKS = {"pending": ("○", "dim"), "in_progress": ("◐", "bold yellow"), "done": ("●", "green")}


class TodoPanel(Static):
    """One line per item with its status; hidden while the list is empty."""

    items: reactive[tuple[TodoItem, ...]] = reactive((), always_update=True)

    def watch_items(self, items: tuple[TodoItem, ...]) -> None:
        self.display = bool(items)
        self.update(render_todos(items))


def render_todos(items: tuple[TodoItem, ...]) -> Text:
    done = sum(i.status == "done" for i in items)
    text = Text(f"todo {done}/{len(items)}", style="bold")
    for item in items:
        mark, style = _MARKS.get(item.status, ("?", ""))
        text.append("\n")
        text.append(f" {mark} ", style=style)
        text.append(
            f"{item.id}. {item.text}", style="dim strike" if item.status == "done" else style
        )
    return text
