"""Play a recorded session back in the TUI (``sparkcode replay ID --play``).

The recorded response bytes go through the agent's own client (served by a
``MockTransport`` at the recorded pace) and the events it yields go through
the main screen's :class:`~sparkcode.tui.turn.TurnRenderer`, so the playback
looks exactly like the live session did. No engine is needed.
"""

from __future__ import annotations

from typing import ClassVar

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Footer, Static

from sparkcode.replay import play_events
from sparkcode.sessions import Session, model_turns_count

from ..stats import StatsTracker
from ..styles import APP_CSS
from ..turn import TurnRenderer
from ..widgets.approval import ApprovalStack
from ..widgets.conversation import Conversation
from ..widgets.status_bar import StatusBar
from ..widgets.todo_panel import TodoPanel


class ReplayScreen(Screen[None]):
    """A read-only conversation that replays one recorded session."""

    CSS_PATH = "replay.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q", "close", "Close")]

    played: reactive[int] = reactive(0)
    """Model requests played so far."""
    finished: reactive[bool] = reactive(False)
    """True once the whole session has been played."""

    def __init__(self, session: Session, *, speed: float = 1.0) -> None:
        super().__init__()
        self.session = session
        self.speed = speed
        self.total = model_turns_count(session)
        self.events_played = 0
        """Agent events handed to the renderer (for tests and the title)."""

    def compose(self) -> ComposeResult:
        yield Static("", id="replay-title")
        yield Conversation(id="conversation")
        yield TodoPanel(id="todos")
        yield ApprovalStack(id="approvals")
        yield StatusBar(id="status-bar")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#todos").display = False
        self.renderer = TurnRenderer(
            self.query_one(Conversation),
            self.query_one(StatusBar),
            self.query_one("#approvals", ApprovalStack),
            StatsTracker(),
            todos=self.query_one("#todos", TodoPanel),
        )
        self._update_title()
        self.play()

    def _update_title(self) -> None:
        pace = "as fast as possible" if self.speed == 0 else f"{self.speed:g}x"
        state = "done" if self.finished else "playing"
        self.query_one("#replay-title", Static).update(
            f"replay of session {self.session.id}: request {self.played}/{self.total}, "
            f"{pace}, {state}"
        )

    def watch_played(self) -> None:
        if self.is_mounted:
            self._update_title()

    def watch_finished(self) -> None:
        if self.is_mounted:
            self._update_title()

    @work(exclusive=True, group="replay")
    async def play(self) -> None:
        from sparkcode.agent.core import events as ev

        conversation = self.query_one(Conversation)
        async for event in play_events(self.session, speed=self.speed):
            if isinstance(event, ev.RequestStarted):
                self.played += 1
            elif isinstance(event, ev.TurnStarted):
                # The main screen shows the prompt when it is typed; here it is replayed.
                await conversation.add_user(event.user_text)
            await self.renderer.handle(event)
            self.events_played += 1
        await conversation.end_segment()
        self.finished = True

    def action_close(self) -> None:
        if len(self.app.screen_stack) > 2 or not isinstance(self.app, ReplayApp):
            self.app.pop_screen()
        else:
            self.app.exit()


class ReplayApp(App[None]):
    """The standalone player ``sparkcode replay ID --play`` runs."""

    TITLE = "sparkcode replay"
    CSS_PATH = APP_CSS

    def __init__(self, session: Session, *, speed: float = 1.0) -> None:
        super().__init__()
        self.session = session
        self.speed = speed

    def on_mount(self) -> None:
        self.push_screen(ReplayScreen(self.session, speed=self.speed))
