"""The sparkcode application: one main screen, an engine watcher, palette commands."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from textual import work
from textual.app import App, SystemCommand
from textual.binding import BindingType
from textual.screen import Screen

from engine.paths import Paths
from engine.supervisor import EngineStatus
from sparkcode.agent.extensions.instructions import Instructions
from sparkcode.config import NotifyMode
from sparkcode.hooks import TrustStore
from sparkcode.replay import Rebuilt
from sparkcode.sessions import SessionStore

from .agent_port import AgentFactory, AgentPort, SessionRequest
from .engine_control import EngineControl
from .keys import bindings
from .messages import (
    AgentModelChanged,
    AttentionNeeded,
    EngineActionFailed,
    EngineBecameReady,
    EnginePanelToggled,
    EngineProgress,
    EngineViewUpdated,
)
from .notify import Notifier
from .palette import slash_commands
from .screens.main import MainScreen
from .styles import APP_CSS
from .widgets.engine_panel import EnginePanel, EngineView


@dataclass(frozen=True)
class TuiSettings:
    """How the app was started."""

    workspace: Path
    """Where the agent's tools work (and @path completion looks)."""
    paths: Paths
    """The start's directories, resolved once by the front (``sparkcode``'s command):
    the recorded sessions (``/sessions``) and the trusted projects (``/trust``)."""
    endpoint: str | None = None
    """The base URL requests go to (a managed engine's URL or a user's server)."""
    model: str | None = None
    """The model name requests ask for."""
    auto_start: bool = False
    """Start the managed engine at launch when it is not running."""
    poll_s: float = 1.0
    """Seconds between engine status polls while the panel is open or the engine boots."""
    idle_poll_s: float = 5.0
    """Seconds between polls otherwise."""
    show_engine_panel: bool = False
    """Open with the engine panel shown."""
    instructions: Instructions = field(default_factory=Instructions)
    """The project instructions read at start (shown, and ``/instructions``)."""
    notify: NotifyMode = "both"
    """``config.toml``'s ``[tui] notify``: how an unfocused terminal is called back."""
    keys: tuple[tuple[str, str], ...] = ()
    """``config.toml``'s ``[keys]``, checked: (binding id, keys) for Textual's keymap."""


class SparkcodeApp(App[None]):
    """The terminal UI: conversation, engine panel, live status bar."""

    TITLE = "sparkcode"
    CSS_PATH = APP_CSS
    BINDINGS: ClassVar[list[BindingType]] = bindings("app")

    def __init__(
        self,
        settings: TuiSettings,
        engine: EngineControl,
        agent_factory: AgentFactory,
        *,
        resume: Rebuilt | None = None,
    ) -> None:
        super().__init__()
        self.settings = settings
        """How the app was started."""
        self.engine = engine
        """The engine behind the conversation."""
        self.agent_factory = agent_factory
        """Builds the agent once the engine answers."""
        self.engine_view = EngineView(
            managed=engine.managed,
            profile=engine.profile_name,
            status=EngineStatus(state="stopped"),
            endpoint=settings.endpoint,
            model=settings.model,
        )
        """The latest engine snapshot."""
        self.agent_model: str | None = None
        """The model the agent asks for, once it is connected."""
        self._busy: str | None = None
        self._error: str | None = None
        self._auto_started = False
        self._last_poll = 0.0
        self._panel_shown = settings.show_engine_panel
        self.notifier = Notifier(settings.notify, self._write_terminal, lambda: self.app_focus)
        """Rings the bell / shows a desktop notification while the terminal is blurred."""
        self._main = MainScreen(
            settings.workspace,
            self._build_agent,
            self.engine_view,
            sessions=SessionStore(settings.paths.sessions_dir),
            trust=TrustStore(settings.paths.state_dir),
            show_engine_panel=settings.show_engine_panel,
            instructions=settings.instructions,
            resume=resume,
        )

    async def _build_agent(self, request: SessionRequest) -> AgentPort:
        # Through the attribute, so a caller may swap the factory before the first prompt.
        return await self.agent_factory(request)

    @property
    def main(self) -> MainScreen:
        """The main screen (others, like the session browser, may be above it)."""
        return self._main

    async def on_mount(self) -> None:
        if self.settings.keys:
            self.set_keymap(dict(self.settings.keys))
        # Pushed rather than returned from get_default_screen: only pushed
        # screens load their CSS_PATH. Mounted before the first poll, so
        # nothing ever talks to an unmounted screen.
        await self.push_screen(self._main)
        self.poll_engine()
        self.set_interval(min(self.settings.poll_s, self.settings.idle_poll_s), self._tick)

    # -- engine watching -------------------------------------------------------

    def _tick(self) -> None:
        state = self.engine_view.status.state
        watching = self._panel_shown or state in ("booting", "unhealthy") or self._busy is not None
        period = self.settings.poll_s if watching else self.settings.idle_poll_s
        if time.monotonic() - self._last_poll >= period - 0.05:
            self.poll_engine()

    @work(thread=True, exclusive=True, group="engine-poll", exit_on_error=False)
    def poll_engine(self) -> None:
        """Read the engine's status off the UI thread."""
        self._last_poll = time.monotonic()
        status = self.engine.status()
        pagemath = self.engine.pagemath(status)
        self.post_message(EngineViewUpdated(self._view(status, pagemath)))

    def _view(self, status: EngineStatus, pagemath: str | None = None) -> EngineView:
        model = self.agent_model or self.settings.model or status.model
        return replace(
            self.engine_view,
            status=status,
            busy=self._busy,
            error=self._error,
            pagemath=pagemath,
            model=model,
            endpoint=self.settings.endpoint or status.base_url,
            log_tail=tuple(status.log_tail),
        )

    def on_engine_view_updated(self, message: EngineViewUpdated) -> None:
        before = self.engine_view.status.state
        view = replace(message.view, busy=self._busy, error=self._error)
        self.engine_view = view
        self.main.show_engine(view)
        state = view.status.state
        # Only the first look at the engine may start it: a user's Stop stays stopped.
        first_look, self._auto_started = not self._auto_started, True
        if (
            self.settings.auto_start
            and first_look
            and view.managed
            and state in ("stopped", "crashed")
        ):
            self.main.notice(f"starting the {view.profile} engine (F2 shows its progress)")
            self.start_engine()
        elif state == "ready" and before != "ready" and view.status.base_url:
            self.post_message(EngineBecameReady(view.status.base_url))

    def on_engine_became_ready(self, message: EngineBecameReady) -> None:
        self.main.engine_ready()

    def on_engine_progress(self, message: EngineProgress) -> None:
        self.main.notice(message.text)

    def on_engine_action_failed(self, message: EngineActionFailed) -> None:
        self.main.error(f"engine {message.action} failed: {message.error}")

    def on_engine_panel_toggled(self, message: EnginePanelToggled) -> None:
        self._panel_shown = message.shown
        if message.shown:
            self.poll_engine()

    def on_attention_needed(self, message: AttentionNeeded) -> None:
        self.notifier.attention(message.text)

    def _write_terminal(self, sequences: str) -> None:
        if self._driver is not None:
            self._driver.write(sequences)
            self._driver.flush()

    def on_agent_model_changed(self, message: AgentModelChanged) -> None:
        self.agent_model = message.model

    def on_engine_panel_start_requested(self, message: EnginePanel.StartRequested) -> None:
        self.start_engine()

    def on_engine_panel_stop_requested(self, message: EnginePanel.StopRequested) -> None:
        self.stop_engine()

    def _set_busy(self, busy: str | None, error: str | None = None) -> None:
        self._busy = busy
        self._error = error
        self.post_message(EngineViewUpdated(replace(self.engine_view, busy=busy, error=error)))

    def _progress(self, text: str) -> None:
        self.post_message(EngineProgress(text))

    @work(thread=True, exclusive=True, group="engine-action", exit_on_error=False)
    def start_engine(self) -> None:
        """Prepare the model and launch the engine without blocking the UI."""
        if not self.engine.managed:
            self.post_message(EngineActionFailed("start", "the endpoint is not managed here"))
            return
        self.call_from_thread(self._set_busy, "starting")
        try:
            self.engine.start(self._progress)
        except Exception as exc:  # shown in the panel and the conversation
            self.call_from_thread(self._set_busy, None, str(exc))
            self.post_message(EngineActionFailed("start", str(exc)))
        else:
            self.call_from_thread(self._set_busy, None)
        self.call_from_thread(self.poll_engine)

    @work(thread=True, exclusive=True, group="engine-action", exit_on_error=False)
    def stop_engine(self) -> None:
        """Stop the engine (SIGINT, SIGTERM, SIGKILL) without blocking the UI."""
        if not self.engine.managed:
            self.post_message(EngineActionFailed("stop", "the endpoint is not managed here"))
            return
        self.call_from_thread(self._set_busy, "stopping")
        try:
            self.engine.stop()
        except Exception as exc:  # shown in the panel and the conversation
            self.call_from_thread(self._set_busy, None, str(exc))
            self.post_message(EngineActionFailed("stop", str(exc)))
        else:
            self.call_from_thread(self._set_busy, None)
        self.call_from_thread(self.poll_engine)

    # -- command palette ---------------------------------------------------------

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """Textual's own entries, the app's actions, then the slash commands that name a
        palette title (built from the command list: ``palette.py``)."""
        yield from super().get_system_commands(screen)
        main = self.main
        yield SystemCommand("Start engine", "Start the managed engine", self.start_engine)
        yield SystemCommand("Stop engine", "Stop the managed engine", self.stop_engine)
        yield SystemCommand("Stop turn", "Stop the running turn", main.action_stop_turn)
        yield SystemCommand(
            "Toggle thinking", "Collapse or expand thinking blocks", main.action_toggle_thinking
        )
        yield from slash_commands(main)
