"""The main screen: conversation, prompt, approvals, engine panel, status bar."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import ClassVar

from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.widgets import Footer
from textual.worker import Worker, WorkerState

from sparkcode.agent.core import events as ev
from sparkcode.agent.core.images import ImageAttachment
from sparkcode.agent.extensions.instructions import Instructions
from sparkcode.hooks import TrustStore
from sparkcode.replay import Rebuilt
from sparkcode.sessions import SessionStore

from ..agent_port import AgentFactory
from ..attach import Attachments, image_lines, image_mentions
from ..commands import CommandError, parse_command
from ..completion import WorkspaceFiles
from ..editor import edit_prompt
from ..keys import bindings
from ..messages import AttentionNeeded, EnginePanelToggled
from ..queueing import Queueing
from ..shell_escape import refusal, run_shell_escape
from ..turn import TurnRenderer
from ..widgets.approval import ApprovalCard, ApprovalStack
from ..widgets.chat import DegenerationWarning, ThinkingBlock
from ..widgets.conversation import Conversation
from ..widgets.engine_panel import EnginePanel, EngineView
from ..widgets.prompt import PromptInput
from ..widgets.queue import MessageQueue, QueuedMessage
from ..widgets.status_bar import StatusBar
from ..widgets.todo_panel import TodoPanel
from .command_surface import CommandSurface

STOP_GRACE_S = 1.5
"""Seconds a turn gets to stop by itself before its worker is cancelled."""
WELCOME = "sparkcode: type a request and press Enter; /help lists the commands."
TYPING_GRACE_S = 2.0
"""An approval card that appears less than this long after the user last changed a
prompt that still holds text leaves the focus in the prompt: they are typing, and
their next letter (a, n and y are in most words) would answer the card. Enter then
queues the message and moves the focus to the card."""


class MainScreen(CommandSurface):
    """Where the conversation happens.

    It gets what it needs when built (the workspace, how to build the agent,
    the first engine view) and reports up with messages: engine Start/Stop from
    the panel (:class:`EnginePanel.StartRequested`...), :class:`EnginePanelToggled`,
    :class:`AgentModelChanged`. The app pushes it before anything else and then
    calls :meth:`show_engine`, :meth:`engine_ready`, :meth:`notice` and
    :meth:`error` only. What slash commands use is :class:`CommandSurface`.
    """

    CSS_PATH = "main.tcss"
    BINDINGS: ClassVar[list[BindingType]] = bindings("screen")

    def __init__(
        self,
        workspace: Path,
        agent_factory: AgentFactory,
        engine_view: EngineView,
        *,
        sessions: SessionStore,
        trust: TrustStore,
        show_engine_panel: bool = False,
        instructions: Instructions | None = None,
        resume: Rebuilt | None = None,
    ) -> None:
        super().__init__(workspace, agent_factory, engine_view, sessions, trust, resume)
        self.instructions = instructions or Instructions()
        """The project instructions read at start (``/instructions``)."""
        self._show_panel = show_engine_panel
        self.pending_prompt: str | None = None
        """A prompt typed while the engine was booting; sent when it is ready."""
        self._renderer: TurnRenderer | None = None
        self._turn_serial = 0
        self._stopped = False
        self.queueing = Queueing(self)
        """What happens to messages typed while a turn runs."""
        self.attachments = Attachments()
        """Images for the next message (``/image``, a pasted path; ``..attach``)."""
        self._prompt_edited_at = 0.0
        """``time.monotonic()`` of the prompt's last change."""

    @property
    def renderer(self) -> TurnRenderer:
        assert self._renderer is not None, "the screen is not mounted"
        return self._renderer

    def compose(self) -> ComposeResult:
        files = WorkspaceFiles(self.workspace)
        with Horizontal(id="body"):
            with Vertical(id="chat"):
                yield Conversation(id="conversation")
                yield TodoPanel(id="todos")
                yield ApprovalStack(id="approvals")
                yield MessageQueue(id="queue")
                yield PromptInput(files, id="prompt")
            yield EnginePanel(id="engine-panel")
        yield StatusBar(id="status-bar")
        yield Footer()

    @property
    def queue(self) -> MessageQueue:
        return self.query_one("#queue", MessageQueue)

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
        self.engine_panel.display = self._show_panel
        self.query_one("#todos").display = False
        self._renderer = TurnRenderer(
            self.conversation,
            self.query_one(StatusBar),
            self.approvals,
            self.stats,
            todos=self.query_one("#todos", TodoPanel),
            attention=lambda text: self.post_message(AttentionNeeded(text)),
        )
        self.engine_panel.view = self.engine_view
        self.notice(WELCOME)
        if self.instructions.files:
            self.notice(self.instructions.summary() + " (/instructions shows them)")
        self._notes(self.instructions.notes)
        if self.resume is not None:
            self.run_worker(self._show_resumed(self.resume), group="notices")
        self.prompt.focus()

    async def on_unmount(self) -> None:
        if self.agent is not None:
            await self.agent.aclose()

    # -- what the app calls (after pushing the screen; also notice and error) ---------

    def show_engine(self, view: EngineView) -> None:
        self.engine_view = view
        if self._renderer is None:
            return  # on_mount shows the latest view
        with contextlib.suppress(NoMatches):  # the app is shutting down
            self.engine_panel.view = view

    def engine_ready(self) -> None:
        """The engine answers now: send the prompt typed while it booted."""
        if self.pending_prompt is not None and not self.turn_running:
            text, self.pending_prompt = self.pending_prompt, None
            self.start_turn(text, shown=True)

    # -- input -----------------------------------------------------------------------

    @on(PromptInput.PasteNote)
    def _paste_note(self, event: PromptInput.PasteNote) -> None:
        (self.error if event.refused else self.notice)(event.text)

    @on(PromptInput.ImagePasted)
    def _image_pasted(self, event: PromptInput.ImagePasted) -> None:
        """A pasted image path attaches the image; refused, the path is typed instead.

        In a worker: attaching waits for the agent, which waits for a booting engine
        (minutes on a CPU); awaited here, it held the screen's message queue and every
        key typed meanwhile stayed unseen until the engine was ready."""
        self.run_worker(
            self._attach_pasted(event.path, event.text), group="attach", exit_on_error=False
        )

    async def _attach_pasted(self, path: Path, text: str) -> None:
        if not await self.attachments.attach(self, path, path.name):
            self.prompt.insert(text)

    @on(PromptInput.Changed, "#prompt")
    def _prompt_edited(self) -> None:
        self._prompt_edited_at = time.monotonic()

    def user_is_typing(self) -> bool:
        """The prompt has the focus and text the user changed in the last
        :data:`TYPING_GRACE_S` seconds."""
        prompt = self.prompt
        return (
            self.focused is prompt
            and bool(prompt.text.strip())
            and time.monotonic() - self._prompt_edited_at < TYPING_GRACE_S
        )

    @on(PromptInput.Submitted, "#prompt")
    def _submitted(self, event: PromptInput.Submitted) -> None:
        text = event.text
        card = self.approvals.pending()
        if not text.strip():
            if card is not None:
                card.focus()  # Enter on an empty prompt goes to the waiting card
            return
        if text.startswith("!"):
            self.shell_escape(text[1:].strip(), event.shown)
            return
        if not text.startswith("/") and (self.attachments.pending or image_mentions(text)):
            self.run_worker(
                self._send_with_images(text, event.shown), group="command", exit_on_error=False
            )
            return
        self.prompt.remember(event.shown)
        self.prompt.value = ""
        if self.turn_running and not text.startswith("/"):
            self.run_worker(self.queueing.add(text), group="notices")
            if card is not None:
                card.focus()  # the turn waits for this answer before the queue moves
        elif text.startswith("/"):
            self.run_command(text)
        else:
            self.send(text)

    def send(self, text: str) -> None:
        """Send a prompt, or hold it until the engine is ready."""
        if self.turn_running:
            self.error("a turn is still running; press escape to stop it first")
            return
        view = self.engine_view
        state = view.status.state
        if view.managed and state != "ready":
            if state in ("booting", "unhealthy") or view.busy == "starting":
                self.pending_prompt = text
                self.run_worker(self.conversation.add_user(text), group="notices")
                self.notice("the engine is still starting; this prompt goes out when it is ready")
                return
            if not self.prompt.value:
                self.prompt.value = text  # refused, not lost: it is there to send again
            if state == "degraded":
                # The head still runs (Start is disabled); its next request would fail.
                self.error(
                    "the engine is degraded: a node is down (the engine panel, F2, "
                    "shows which and its log); press Stop there, then Start"
                )
            else:
                self.error(f"the engine is {state}; open the engine panel (F2) and press Start")
            return
        self.start_turn(text)

    def shell_escape(self, command: str, shown: str) -> None:
        """``!command``: run it under the shell tool's rules (``..shell_escape``); a
        refusal is shown and the prompt keeps the text."""
        problem = refusal(command, turn_running=self.turn_running, view=self.engine_view)
        if problem is not None:
            self.error(problem)
            return
        self.prompt.remember(shown)
        self.prompt.value = ""
        self.turn_running, self._stopped = True, False
        self._turn_serial += 1
        self._run_shell(command, self._turn_serial)

    @work(exclusive=True, group="turn", exit_on_error=False)
    async def _run_shell(self, command: str, serial: int) -> None:
        await run_shell_escape(self, command, serial)

    async def _send_with_images(self, text: str, shown: str) -> None:
        """Send a message with images: each one is read and accepted before the prompt
        is cleared, so a refusal (shown) loses nothing typed."""
        if self.turn_running:
            self.error(
                "images go with a new message: wait for the running turn to end "
                "(or press escape); your message stays in the prompt"
            )
            return
        images = await self.attachments.take(self, text)
        if images is None:
            return
        self.prompt.remember(shown)
        self.prompt.value = ""
        self.start_turn(text, images=images)

    def start_turn(
        self, text: str, *, shown: bool = False, images: tuple[ImageAttachment, ...] = ()
    ) -> None:
        """Run a turn now; ``shown`` when the prompt is already on screen."""
        self.turn_running = True
        self._stopped = False
        self._turn_serial += 1
        self._run_turn(text, shown, images)

    @work(exclusive=True, group="turn", exit_on_error=False)
    async def _run_turn(
        self, text: str, shown: bool, images: tuple[ImageAttachment, ...] = ()
    ) -> None:
        conv = self.conversation
        if not shown:
            await conv.add_user(text)
        for line in image_lines(images):
            await conv.add_notice(line)
        try:
            agent = await self.ensure_agent()
            stream = agent.run_turn(text, images)
            try:
                async for event in stream:
                    if isinstance(event, ev.SteerDelivered):
                        await self.queueing.steer_delivered(event.text)
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
            self.approvals.drop_all()
            self.queueing.take_back()
            self.turn_running = False
            self.stats.turn_finished()
            self.query_one(StatusBar).stats = self.stats.current
            self.prompt.files.invalidate()

    # -- the queue: messages typed while a turn runs (..queueing) ------------------------

    def action_send_now(self) -> None:
        """Steer: what the prompt holds, and every queued message, go into the running
        turn at its next step; with no turn running the first queued one is sent."""
        self.run_worker(self.queueing.send_now(), group="notices")

    @on(QueuedMessage.Acted)
    async def _queued_acted(self, event: QueuedMessage.Acted) -> None:
        await self.queueing.acted(event.item, event.action)

    @on(Worker.StateChanged)
    def _turn_ended(self, event: Worker.StateChanged) -> None:
        if event.worker.group == "turn" and event.state in (
            WorkerState.SUCCESS,
            WorkerState.ERROR,
            WorkerState.CANCELLED,
        ):
            self.queueing.turn_ended(stopped=self._stopped or event.state == WorkerState.CANCELLED)

    # -- approvals ---------------------------------------------------------------

    @on(ApprovalCard.Shown)
    def _card_shown(self, event: ApprovalCard.Shown) -> None:
        if not self.user_is_typing():
            event.card.focus()
        elif event.card is self.approvals.pending():
            self.notice(
                "an approval waits: Enter queues what you are typing and moves to "
                "the card (y approve, a always, n deny)"
            )

    @on(ApprovalCard.Decided)
    def _decided(self) -> None:
        self.prompt.focus()  # the stack has answered the request and removed the card

    def on_paste(self, event: events.Paste) -> None:
        """A paste while another widget has the focus (a card) goes to the prompt whole."""
        self.prompt.focus()
        self.prompt.post_message(events.Paste(event.text))

    @on(ApprovalCard.Typing)
    def _typed_on_card(self, event: ApprovalCard.Typing) -> None:
        """Text typed while a card had focus goes to the prompt, not to the card."""
        self.prompt.focus()
        self.prompt.insert(event.character)

    @on(DegenerationWarning.StopRequested)
    def _stop_degenerate(self) -> None:
        self.action_stop_turn()

    # -- actions -------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "stop_turn":
            return self.turn_running
        if action == "send_now":
            return self.turn_running or bool(self._renderer and self.queue.items)
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
        self.post_message(EnginePanelToggled(bool(panel.display)))

    def action_stop_turn(self) -> None:
        """Stop the running turn (the conversation so far is kept).

        The agent is asked first, so it ends the turn cleanly at the next frame;
        if it has not after ``STOP_GRACE_S``, the turn's worker is cancelled.
        """
        if not self.turn_running:
            return
        self._stopped = True
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

    def action_open_editor(self) -> None:
        """Edit the prompt in ``$VISUAL`` / ``$EDITOR`` (``..editor``)."""
        problem = edit_prompt(self.app, self.prompt, self.workspace)
        if problem is not None:
            self.error(problem)

    def action_clear(self) -> None:
        """Start a new conversation."""
        self.run_command("/clear")

    # -- slash commands (declared with their handlers in ..commands) -----------------

    def run_command(self, line: str) -> None:
        try:
            parsed = parse_command(line)
        except CommandError as exc:
            self.error(str(exc))
            return
        self.run_worker(
            self._command(parsed.name, parsed.arg), group="command", exit_on_error=False
        )

    async def _command(self, name: str, arg: str) -> None:
        parsed = parse_command(f"/{name} {arg}")
        try:
            if parsed.command.idle_only and self.turn_running:
                raise CommandError("a turn is running; press escape to stop it first")
            await parsed.command.handler(self, arg)
        except Exception as exc:  # a failed command is reported, never fatal
            await self.conversation.add_error(f"/{name} failed: {exc}")
