"""The engine panel: what the engine is doing, with start and stop buttons."""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Button, Log, Static

from engine.supervisor import EngineStatus, NodeStatus, likely_cause

LOG_LINES = 30
"""Log lines the panel keeps."""


@dataclass(frozen=True)
class EngineView:
    """Everything the panel renders, in one immutable snapshot."""

    managed: bool
    """False when sparkcode talks to an endpoint it does not run."""
    profile: str | None
    status: EngineStatus
    endpoint: str | None = None
    """The base URL requests go to."""
    model: str | None = None
    """The model the agent asks for."""
    busy: str | None = None
    """An action in progress ("starting", "stopping") or None."""
    error: str | None = None
    """The last start/stop failure."""
    pagemath: str | None = None
    """The prefix-cache page math line, when the engine reports it."""
    log_tail: tuple[str, ...] = field(default=())
    """Recent engine log lines (booting, crashed)."""


def human_gib(n: int) -> str:
    """Bytes as GiB with one decimal (engine memory is always large)."""
    return f"{n / 2**30:.1f} GiB"


def pool_line(plugin: list[str]) -> str | None:
    """The FP4 pool's live coverage and swaps, from the plugin's lines in the engine log.

    ``fp4_pool: active (151 experts at 4 bits; live coverage 41.2% of 9000 routed tokens)``
    and ``fp4_reselect: live (3 swaps in 40 checks; last: ...)`` become
    ``151 at 4 bits, coverage 41.2% · 3 live swaps``.
    """
    parts: list[str] = []
    for line in plugin:
        inner = line.partition("(")[2].rstrip(")")
        if line.startswith("fp4_pool: active ("):
            experts, _, coverage = inner.partition("; live coverage ")
            parts.append(
                experts.replace(" experts", "") + ", coverage " + coverage.partition(" of ")[0]
            )
        elif line.startswith("fp4_reselect: live ("):
            parts.append(inner.partition(" in ")[0].replace(" swaps", " live swaps"))
        elif line.startswith("fp4_reselect: failed"):
            parts.append("live swaps failed")
    return " · ".join(parts) or None


def state_line(view: EngineView) -> Text:
    """``ready``, ``booting (loading weights)``, ``crashed (exit 1)``... coloured."""
    status = view.status
    if not view.managed:
        if status.healthy:
            return Text("endpoint, answering", style="bold green")
        return Text("endpoint, not answering", style="bold red")
    if view.busy:
        return Text(f"{view.busy}…", style="bold yellow")
    colour = {
        "ready": "green",
        "booting": "yellow",
        "unhealthy": "yellow",
        "degraded": "red",
        "crashed": "red",
        "stopped": "dim",
    }[status.state]
    text = Text(status.state, style=f"bold {colour}")
    if status.state == "booting" and status.phase:
        text.append(f" ({status.phase})", style=colour)
    if status.state == "crashed":
        code = "unknown" if status.exit_code is None else str(status.exit_code)
        text.append(f" (exit {code})", style=colour)
    if status.state == "degraded":
        text.append(" (a node is down)", style=colour)
    return text


CAUSE_CHARS = 160
"""How much of a dead node's cause line the row quotes (the panel wraps it; the whole
line is in the log below and in ``engine status``)."""


def node_line(node: NodeStatus) -> Text:
    """A worker node of a multi-node engine: ``running (ssh spark2)``, ``exited 137``..."""
    colour = {"running": "green", "exited": "red", "stopped": "dim"}.get(node.state, "yellow")
    text = Text(node.state, style=f"bold {colour}")
    if node.state == "exited":
        code = "unknown" if node.exit_code is None else str(node.exit_code)
        signal = f", signal {node.exit_signal}" if node.exit_signal else ""
        text.append(f" (exit {code}{signal})", style=colour)
    text.append(f" · {node.where}", style="dim")
    if node.memory_rss_bytes:
        text.append(f" · {human_gib(node.memory_rss_bytes)}", style="dim")
    if node.state == "exited":
        # A headless node whose TP process died exits 0: the log line is the only reason.
        cause = likely_cause(node.log_tail)
        if cause:
            text.append(f" · {cause[:CAUSE_CHARS]}", style=colour)
    if node.error:
        text.append(f" · {node.error[:CAUSE_CHARS]}", style="yellow")
    return text


class EnginePanel(Vertical):
    """Profile, state, model, memory, log tail; start and stop without blocking."""

    view: reactive[EngineView | None] = reactive(None, always_update=True)
    """The snapshot shown; the app assigns a fresh one on every poll."""

    class StartRequested(Message):
        """The user pressed Start."""

    class StopRequested(Message):
        """The user pressed Stop."""

    def compose(self) -> ComposeResult:
        yield Static("Engine", classes="panel-title")
        yield Static("", id="engine-facts")
        with Horizontal(id="engine-buttons"):
            yield Button("Start", id="engine-start", variant="success", compact=True)
            yield Button("Stop", id="engine-stop", variant="error", compact=True)
        yield Static("", id="engine-error")
        yield Static("log", classes="panel-subtitle")
        yield Log(id="engine-log", max_lines=LOG_LINES, auto_scroll=True)

    def on_mount(self) -> None:
        self.watch_view(self.view)

    def watch_view(self, view: EngineView | None) -> None:
        if not self.is_mounted:
            return
        facts = self.query_one("#engine-facts", Static)
        start = self.query_one("#engine-start", Button)
        stop = self.query_one("#engine-stop", Button)
        error = self.query_one("#engine-error", Static)
        if view is None:
            facts.update("checking…")
            start.disabled = stop.disabled = True
            return
        facts.update(self._facts(view))
        # An endpoint sparkcode does not run has no buttons and no log to show.
        for selector in ("#engine-buttons", "#engine-log", ".panel-subtitle"):
            self.query_one(selector).display = view.managed
        state = view.status.state
        running = state in ("ready", "booting", "unhealthy", "degraded")
        start.disabled = not view.managed or running or view.busy is not None
        stop.disabled = not view.managed or view.busy is not None or state == "stopped"
        error.update(Text(view.error or "", style="red"))
        error.display = bool(view.error)
        self.set_class(state in ("crashed", "degraded"), "-crashed")
        # A multi-node engine's worker lines follow the head's, tagged with the node.
        nodes = tuple(f"[{n.name}] {line}" for n in view.status.nodes for line in n.log_tail)
        self._show_log(view.log_tail + nodes)

    def _facts(self, view: EngineView) -> Text:
        status = view.status
        rows: list[tuple[str, Text | str | None]] = [
            ("profile", view.profile or "–"),
            ("state", state_line(view)),
            ("model", view.model or status.model),
            ("url", view.endpoint or status.base_url),
        ]
        if view.managed:
            rows.append(
                ("memory", human_gib(status.memory_rss_bytes) if status.memory_rss_bytes else None)
            )
        for node in status.nodes:
            rows.append((node.name, node_line(node)))
        if view.pagemath:
            rows.append(("pages", view.pagemath))
        rows.append(("fp4 pool", pool_line(status.plugin)))
        out = Text()
        for key, value in rows:
            if value is None:
                continue
            out.append(f"{key:<8}", style="dim")
            out.append(value if isinstance(value, Text) else Text(value))
            out.append("\n")
        out.rstrip()
        return out

    def _show_log(self, lines: tuple[str, ...]) -> None:
        log = self.query_one("#engine-log", Log)
        if tuple(log.lines) == lines[-LOG_LINES:]:
            return
        log.clear()
        log.write_lines(lines[-LOG_LINES:])

    @on(Button.Pressed, "#engine-start")
    def _start(self, event: Button.Pressed) -> None:
        event.stop()
        self.post_message(self.StartRequested())

    @on(Button.Pressed, "#engine-stop")
    def _stop(self, event: Button.Pressed) -> None:
        event.stop()
        self.post_message(self.StopRequested())
