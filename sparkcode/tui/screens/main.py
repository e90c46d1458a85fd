"""The main screen: conversation, prompt, approvals, engine panel, status bar."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Footer, Input, Markdown

from ..agent_port import AgentPort
from ..commands import CommandError, help_markdown, parse_command
from ..completion import WorkspaceFiles
from ..stats import StatsTracker
from ..turn import Detector, TurnRenderer, default_detector_factory
from ..widgets.approval import ApprovalCard
from ..widgets.chat import DegenerationWarning, ThinkingBlock
from ..widgets.conversation import Conversation
from ..widgets.engine_panel import EnginePanel, EngineView
from ..widgets.prompt import PromptInput
from ..widgets.status_bar import StatusBar

if TYPE_CHECKING:
    from ..app import SparkcodeApp

STOP_GRACE_S = 1.5
"""Seconds a turn gets to stop by itself before its worker is cancelled."""
WELCOME = "sparkcode: type a request and press Enter; /help lists the commands."


class MainScreen(Screen[None]):
    """Where the conversation happens."""

    CSS_PATH = "main.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f2", "toggle_engine", "Engine"),
        Binding("escape", "stop_turn", "Stop turn"),
        Binding("ctrl+t", "toggle_thinking", "Thinking"),
        Binding("ctrl+l", "clear", "Clear"),
    ]

    turn_running: reactive[bool] = reactive(False)
    """True while a turn streams."""

    def __init__(self, detector_factory: Callable[[], Detector] | None = None) -> None:
        super().__init__()
        self.agent: AgentPort | None = None
        """The agent, built on the first prompt (once the engine answers)."""
        self.stats = StatsTracker()
        """The status bar's figures."""
        self.pending_prompt: str | None = None
        """A prompt typed while the engine was booting; sent when it is ready."""
        self._detector_factory = detector_factory or default_detector_factory()
        self._deferred: list[Callable[[AgentPort], None]] = []
        self._renderer: TurnRenderer | None = None
        self._turn_serial = 0
        self._early: list[Callable[[], Awaitable[object]]] = []

    @property
    def renderer(self) -> TurnRenderer:
        assert self._renderer is not None, "the screen is not mounted"
        return self._renderer

    @property
    def sparkcode(self) -> SparkcodeApp:
        from ..app import SparkcodeApp

        assert isinstance(self.app, SparkcodeApp)
        return self.app

    def compose(self) -> ComposeResult:
        files = WorkspaceFiles(self.sparkcode.settings.workspace)
        with Horizontal(id="body"):
            with Vertical(id="chat"):
                yield Conversation(id="conversation")
                yield Vertical(id="approvals")
                yield PromptInput(files, id="prompt")
            yield EnginePanel(id="engine-panel")
        yield StatusBar(id="status-bar")
        yield Footer()

    @property
    def conversation(self) -> Conversation:
        return self.query_one("#conversation", Conversation)

    @property
    def prompt(self) -> PromptInput:
        return self.query_one("#prompt", PromptInput)

    @property
    def engine_panel(self) -> EnginePanel:
        return self.query_one("#engine-panel", EnginePanel)

    @property
    def engine_panel_shown(self) -> bool:
        try:
            return self._renderer is not None and bool(self.engine_panel.display)
        except NoMatches:
            return False

    def on_mount(self) -> None:
        self.engine_panel.display = self.sparkcode.settings.show_engine_panel
        self.query_one("#approvals").display = False
        self._renderer = TurnRenderer(
            self.conversation, self.query_one(StatusBar), self.query_one("#approvals", Vertical),
            self.stats, self._detector_factory,
        )
        self.engine_panel.view = self.sparkcode.engine_view
        self.notice(WELCOME)
        for add in self._early:
            self.run_worker(add(), group="notices")
        self._early.clear()
        self.prompt.focus()

    async def on_unmount(self) -> None:
        if self.agent is not None:
            await self.agent.aclose()

    # -- small helpers the app uses ------------------------------------------------

    def notice(self, text: str) -> None:
        self.run_worker(self._when_mounted(lambda: self.conversation.add_notice(text)),
                        group="notices")

    def error(self, text: str) -> None:
        self.run_worker(self._when_mounted(lambda: self.conversation.add_error(text)),
                        group="notices")

    async def _when_mounted(self, add: Callable[[], Awaitable[object]]) -> None:
        if self._renderer is None:
            self._early.append(add)
        else:
            await add()

    def show_engine(self, view: EngineView) -> None:
        if self._renderer is None:
            return  # on_mount shows the app's latest view
        with contextlib.suppress(NoMatches):  # the app is shutting down
            self.engine_panel.view = view

    def engine_ready(self) -> None:
        """The engine answers now: send the prompt typed while it booted."""
        if self.pending_prompt is not None and not self.turn_running:
            text, self.pending_prompt = self.pending_prompt, None
            self.start_turn(text, shown=True)

    # -- input -----------------------------------------------------------------------

    @on(Input.Submitted, "#prompt")
    def _submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text:
            return
        self.prompt.remember(text)
        self.prompt.value = ""
        if text.startswith("/"):
            self.run_command(text)
        else:
            self.send(text)

    def send(self, text: str) -> None:
        """Send a prompt, or hold it until the engine is ready."""
        if self.turn_running:
            self.error("a turn is still running; press escape to stop it first")
            return
        view = self.sparkcode.engine_view
        state = view.status.state
        if view.managed and state != "ready":
            if state in ("booting", "unhealthy") or view.busy == "starting":
                self.pending_prompt = text
                self.run_worker(self.conversation.add_user(text), group="notices")
                self.notice("the engine is still starting; this prompt goes out when it is "
                            "ready")
                return
            self.error(f"the engine is {state}; open the engine panel (F2) and press "
                       "Start")
            return
        self.start_turn(text)

    def start_turn(self, text: str, *, shown: bool = False) -> None:
        """Run a turn now; ``shown`` when the prompt is already on screen."""
        self.turn_running = True
        self._turn_serial += 1
        self._run_turn(text, shown)

    async def _ensure_agent(self) -> AgentPort:
        if self.agent is None:
            agent = await self.sparkcode.agent_factory()
            for apply in self._deferred:
                apply(agent)
            self._deferred.clear()
            self.agent = agent
            self.sparkcode.agent_model = agent.model
        return self.agent

    @work(exclusive=True, group="turn", exit_on_error=False)
    async def _run_turn(self, text: str, shown: bool) -> None:
        conv = self.conversation
        if not shown:
            await conv.add_user(text)
        try:
            agent = await self._ensure_agent()
            stream = agent.run_turn(text)
            try:
                async for event in stream:
                    await self.renderer.handle(event)
            finally:
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    await aclose()
        except asyncio.CancelledError:
            await conv.end_segment()
            await conv.add_notice("turn stopped")
            raise
        except Exception as exc:  # anything the agent did not turn into an event
            await conv.add_error(f"{type(exc).__name__}: {exc}")
        finally:
            self._drop_approvals()
            self.turn_running = False
            self.stats.turn_finished()
            self.query_one(StatusBar).stats = self.stats.current
            self.prompt.files.invalidate()

    def _drop_approvals(self) -> None:
        approvals = self.query_one("#approvals", Vertical)
        for card in approvals.query(ApprovalCard):
            card.request.respond(False)
            card.remove()
        approvals.display = False

    # -- approvals ---------------------------------------------------------------

    @on(ApprovalCard.Decided)
    def _decided(self, event: ApprovalCard.Decided) -> None:
        event.card.request.respond(event.decision)
        event.card.remove()
        approvals = self.query_one("#approvals", Vertical)
        approvals.display = len(approvals.query(ApprovalCard)) > 1
        self.prompt.focus()

    @on(DegenerationWarning.StopRequested)
    def _stop_degenerate(self) -> None:
        self.action_stop_turn()

    @on(EnginePanel.StartRequested)
    def _start_engine(self) -> None:
        self.sparkcode.start_engine()

    @on(EnginePanel.StopRequested)
    def _stop_engine(self) -> None:
        self.sparkcode.stop_engine()

    # -- actions -------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "stop_turn":
            return self.turn_running
        return True

    def watch_turn_running(self, running: bool) -> None:
        self.refresh_bindings()
        if self._renderer is not None:
            # A blinking cursor repaints twice a second: not while a stream paints.
            self.prompt.cursor_blink = not running

    def action_toggle_engine(self) -> None:
        """Show or hide the engine panel."""
        panel = self.engine_panel
        panel.display = not panel.display
        if panel.display:
            self.sparkcode.poll_engine()

    def action_stop_turn(self) -> None:
        """Stop the running turn (the conversation so far is kept).

        The agent is asked first, so it ends the turn cleanly at the next frame;
        if it has not after ``STOP_GRACE_S``, the turn's worker is cancelled.
        """
        if not self.turn_running:
            return
        if self.agent is not None:
            self.agent.cancel()
        serial = self._turn_serial
        self.set_timer(STOP_GRACE_S, lambda: self._force_stop(serial))

    def _force_stop(self, serial: int) -> None:
        if self.turn_running and serial == self._turn_serial:
            for worker in self.workers:
                if worker.group == "turn":
                    worker.cancel()

    def action_toggle_thinking(self) -> None:
        """Collapse every thinking block, or expand them all if all are collapsed."""
        blocks = list(self.query(ThinkingBlock))
        collapse = not all(block.collapsed for block in blocks)
        for block in blocks:
            block.collapsed = collapse

    def action_clear(self) -> None:
        """Start a new conversation."""
        self.run_command("/clear")

    # -- slash commands ------------------------------------------------------------

    def run_command(self, line: str) -> None:
        try:
            command = parse_command(line)
        except CommandError as exc:
            self.error(str(exc))
            return
        self.run_worker(self._command(command.name, command.arg), group="command",
                        exit_on_error=False)

    def _with_agent(self, apply: Callable[[AgentPort], None]) -> None:
        if self.agent is None:
            self._deferred.append(apply)
        else:
            apply(self.agent)

    async def _command(self, name: str, arg: str) -> None:
        conv = self.conversation
        handlers: dict[str, Callable[[str], Awaitable[None]]] = {
            "help": self._help, "clear": self._clear, "effort": self._effort,
            "budget": self._budget, "model": self._model, "approve": self._approve,
            "undo": self._undo, "sessions": self._sessions, "engine": self._engine,
        }
        try:
            await handlers[name](arg)
        except Exception as exc:  # a failed command is reported, never fatal
            await conv.add_error(f"/{name} failed: {exc}")

    async def _help(self, arg: str) -> None:
        await self.conversation.mount(Markdown(help_markdown(), classes="help"))

    async def _clear(self, arg: str) -> None:
        if self.turn_running:
            raise CommandError("a turn is running; press escape to stop it first")
        await self.conversation.clear()
        self._with_agent(lambda agent: agent.reset())
        self.query_one(StatusBar).stats = self.stats.reset_context()
        await self.conversation.add_notice("new conversation")

    async def _effort(self, arg: str) -> None:
        self._with_agent(lambda agent: agent.set_reasoning_effort(arg))
        await self.conversation.add_notice(f"reasoning effort: {arg}")

    async def _budget(self, arg: str) -> None:
        self._with_agent(lambda agent: agent.set_thinking_token_budget(int(arg)))
        await self.conversation.add_notice(f"thinking budget: {int(arg)} tokens")

    async def _model(self, arg: str) -> None:
        if arg:
            self._with_agent(lambda agent: agent.set_model(arg))
            self.sparkcode.agent_model = arg
            await self.conversation.add_notice(f"model: {arg}")
            return
        current = self.agent.model if self.agent else self.sparkcode.engine_view.model
        await self.conversation.add_notice(f"model: {current or 'not known yet'}")

    async def _approve(self, arg: str) -> None:
        self._with_agent(lambda agent: agent.set_approval_mode(arg))
        await self.conversation.add_notice(f"approval mode: {arg}")

    async def _undo(self, arg: str) -> None:
        if self.turn_running:
            raise CommandError("a turn is running; press escape to stop it first")
        if self.agent is None:
            raise CommandError("nothing to undo yet")
        await self.conversation.add_notice(await self.agent.undo())
        self.prompt.files.invalidate()

    async def _sessions(self, arg: str) -> None:
        try:
            module = importlib.import_module("sparkcode.tui.screens.sessions")
            screen_class = module.SessionsScreen
        except (ImportError, AttributeError):
            await self.conversation.add_notice("the session browser is not available yet")
            return
        await self.app.push_screen(screen_class())

    async def _engine(self, arg: str) -> None:
        self.action_toggle_engine()

