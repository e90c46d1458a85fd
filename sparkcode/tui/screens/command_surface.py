"""The main screen's conversation side: the surface slash-command handlers use.

:class:`CommandSurface` owns the conversation's state (``..conversation_state``,
a plain object: the agent, built on first use, a setting given before applied once
it is, the recording the next agent continues) and shows notices and which
conversation is shown: a new one, a resumed recording, the history redrawn after
undo. The handlers in ``..commands`` work through it (as ``CommandScreen``).
:class:`~sparkcode.tui.screens.main.MainScreen` adds the layout, the input and
command dispatch, the running turn and the key bindings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Markdown

from engine.errors import UserError
from sparkcode.agent.core.events import ApprovalDecision, ApprovalRequested
from sparkcode.hooks import TrustStore
from sparkcode.replay import Rebuilt
from sparkcode.sessions import SessionStore

from ..agent_port import AgentFactory, AgentPort
from ..completion import WorkspaceFiles
from ..conversation_state import ConversationState
from ..messages import AgentModelChanged
from ..resuming import choose_resume
from ..stats import StatsTracker
from ..transcript import show_transcript
from ..widgets.approval import ApprovalStack
from ..widgets.conversation import Conversation
from ..widgets.engine_panel import EngineView
from ..widgets.prompt import PromptInput
from ..widgets.status_bar import StatusBar
from ..widgets.todo_panel import TodoPanel
from .sessions import SessionsScreen


class CommandSurface(Screen[None]):
    """The conversation's side of the main screen (composed by the subclass)."""

    turn_running: reactive[bool] = reactive(False)
    """True while a turn streams."""

    def __init__(
        self,
        workspace: Path,
        agent_factory: AgentFactory,
        engine_view: EngineView,
        sessions: SessionStore,
        trust: TrustStore,
        resume: Rebuilt | None,
    ) -> None:
        super().__init__()
        self.sessions = sessions
        """The recorded sessions (``/sessions``, resume)."""
        self.trust = trust
        """The projects trusted to run their hooks (``/trust`` remembers this one)."""
        self.state = ConversationState(workspace, agent_factory, resume)
        """The shown conversation's agent, workspace and what it continues."""
        self.engine_view = engine_view
        """The latest engine snapshot the app showed us."""
        self.stats = StatsTracker()
        """The status bar's figures."""
        self._shown_notes: set[str] = set()

    # The state's fields, as the command handlers (``CommandScreen``) and tests read them.

    @property
    def agent(self) -> AgentPort | None:
        return self.state.agent

    @agent.setter
    def agent(self, agent: AgentPort | None) -> None:
        self.state.agent = agent

    @property
    def resume(self) -> Rebuilt | None:
        return self.state.resume

    @resume.setter
    def resume(self, resume: Rebuilt | None) -> None:
        self.state.resume = resume

    @property
    def workspace(self) -> Path:
        return self.state.workspace

    @workspace.setter
    def workspace(self, workspace: Path) -> None:
        self.state.workspace = workspace

    @property
    def mode_before_plan(self) -> str | None:
        return self.state.mode_before_plan

    @mode_before_plan.setter
    def mode_before_plan(self, mode: str | None) -> None:
        self.state.mode_before_plan = mode

    @property
    def conversation(self) -> Conversation:
        return self.query_one("#conversation", Conversation)

    @property
    def approvals(self) -> ApprovalStack:
        return self.query_one("#approvals", ApprovalStack)

    @property
    def prompt(self) -> PromptInput:
        return self.query_one("#prompt", PromptInput)

    def notice(self, text: str) -> None:
        self.run_worker(self.conversation.add_notice(text), group="notices")

    def error(self, text: str) -> None:
        self.run_worker(self.conversation.add_error(text), group="notices")

    def _notes(self, notes: Sequence[str]) -> None:
        for note in notes:
            if note not in self._shown_notes:
                self._shown_notes.add(note)
                self.notice(f"note: {note}")

    async def ensure_agent(self) -> AgentPort:
        """The agent, built now if it is not yet (the settings given meanwhile applied)."""
        agent, built = await self.state.ensure_agent()
        if built:
            self.model_changed(agent.model)
            self._notes(agent.notes)
        return agent

    # -- what command handlers use -----------------------------------------------------

    def with_agent(self, apply: Callable[[AgentPort], None]) -> None:
        """Apply a setting to the agent now, or once it is built."""
        self.state.with_agent(apply)

    async def say(self, text: str) -> None:
        """A notice in the conversation."""
        await self.conversation.add_notice(text)

    async def show_markdown(self, text: str) -> None:
        await self.conversation.mount(Markdown(text, classes="help"))

    def model_changed(self, model: str) -> None:
        self.engine_view = replace(self.engine_view, model=model)
        self.post_message(AgentModelChanged(model))

    def workspace_changed(self) -> None:
        """Files may have changed behind the completer's back."""
        self.prompt.files.invalidate()

    async def ask(self, request: ApprovalRequested) -> ApprovalDecision:
        """Show an approval card for ``request`` and wait for the user's answer."""
        await self.approvals.add(request)
        return await request.future

    # -- which conversation is shown -------------------------------------------------

    async def new_conversation(self) -> None:
        await self.conversation.clear()
        self.query_one("#todos", TodoPanel).items = ()
        self.with_agent(lambda agent: agent.reset())
        self.query_one(StatusBar).stats = self.stats.reset_context()
        await self.say("new conversation")

    async def redraw(self) -> None:
        """Draw the conversation again from the agent's history (after undo/redo)."""
        if self.agent is None:
            return
        await self.conversation.clear()
        await show_transcript(self.conversation, self.agent.transcript()[1:])

    async def open_sessions(self) -> None:
        def chosen(session_id: str | None) -> None:
            if session_id is not None:
                self.run_worker(
                    self.resume_session(session_id), group="command", exit_on_error=False
                )

        await self.app.push_screen(SessionsScreen(self.sessions), callback=chosen)

    async def resume_session(self, session_id: str) -> None:
        """Continue a recorded session; one of another workspace only if the user agrees."""
        if self.turn_running:
            await self.conversation.add_error(
                "a turn is running; press escape to stop it before resuming another session"
            )
            return
        try:
            rebuilt, why_not = await choose_resume(
                self.app, self.sessions, self.workspace, session_id
            )
        except UserError as exc:
            await self.conversation.add_error(f"cannot resume {session_id}: {exc}")
            return
        if rebuilt is None:
            await self.say(why_not)
            return
        await self.state.close_agent()
        if Path(rebuilt.workspace) != self.workspace:
            self.workspace = Path(rebuilt.workspace)
            self.prompt.set_files(WorkspaceFiles(self.workspace))
            await self.say(f"workspace: {self.workspace}")
        self.resume = rebuilt
        await self.conversation.clear()
        self.query_one(StatusBar).stats = self.stats.reset_context()
        await self._show_resumed(rebuilt)

    async def _show_resumed(self, rebuilt: Rebuilt) -> None:
        await show_transcript(self.conversation, rebuilt.history[1:])
        self.query_one("#todos", TodoPanel).items = rebuilt.todos
        await self.say(
            f"resumed session {rebuilt.session_id} after turn {rebuilt.turns}: your "
            "next prompt continues it (recorded as a new session naming it)"
        )
        self._notes(rebuilt.notes)
