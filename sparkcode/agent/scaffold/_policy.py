"""The per-turn policy: the small-model guards, called in order at the loop's points.

The loop (``loop.py``, ``_turn.py``) calls :class:`Scaffold` where it makes the session
(:meth:`~Scaffold.start_session`, :meth:`~Scaffold.set_up_tools`), takes a user message
(:meth:`~Scaffold.begin_turn`), is about to send a request
(:meth:`~Scaffold.before_request`), has read a reply's calls
(:meth:`~Scaffold.after_reply`) and records a call's result
(:meth:`~Scaffold.on_tool_result`); the policy passes each to its guards in order. A
new guard is one module with a :class:`~._guard.Guard` subclass, added to
:data:`DEFAULT_GUARDS` (or to a policy given to the agent).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from ..core.calls import CheckedCall
from ..core.events import Notice
from ..core.settings import AgentSettings
from ..tools import ToolContext, ToolRegistry
from ._edit_guards import EditGuards
from ._first_call import FirstStepTool
from ._forced import ForcedTool
from ._guard import Guard, RequestPlan, Session, Task, ToolResult
from ._hidden import HiddenArguments
from ._kept import KeepToldFiles
from ._questions import QuestionsReadOnly
from ._reminders import TaskReminders
from ._run_first import RunBeforeAnswer
from ._steps import StructuredSteps
from ._workspace_files import WorkspaceFiles

GuardFactory = Callable[[AgentSettings], Guard]

DEFAULT_GUARDS: tuple[GuardFactory, ...] = (
    HiddenArguments,
    EditGuards,
    KeepToldFiles,
    QuestionsReadOnly,
    RunBeforeAnswer,
    FirstStepTool,
    ForcedTool,
    StructuredSteps,
    WorkspaceFiles,
    TaskReminders,
)
"""Every guard of a session, in the order their hooks run. Each reads its own settings
when it acts (off by default, on in the small-model profiles). The order matters where
one guard reads what another set: the arguments are hidden before the steps' schema and
tools prompt are made, the workspace's files end the system prompt after the tools
prompt, the kept files' notice comes before the question's, the questions guard
narrows ``task.tools`` before the steps guard makes the turn's schema, and the
run-before-answer guard sets :attr:`RequestPlan.run_first` before the others read it;
a forced tool's ``tool_choice`` wins over ``"required"``."""


class Scaffold:
    """The small-model mechanisms of one conversation (``Agent.scaffold``)."""

    def __init__(self, guards: Sequence[Guard]) -> None:
        self.guards = list(guards)
        self.task: Task | None = None
        """The running (or last) turn's task; None before the first turn."""

    @classmethod
    def for_settings(cls, settings: AgentSettings, extra: Sequence[GuardFactory] = ()) -> Scaffold:
        """The default guards (and ``extra`` after them) for ``settings``."""
        return cls([make(settings) for make in (*DEFAULT_GUARDS, *extra)])

    @property
    def steps(self) -> bool:
        """Small-model mode: every reply is one JSON step (a guard says so)."""
        return any(guard.steps for guard in self.guards)

    def start_session(self, workspace: Path, tools: ToolRegistry, system_prompt: str) -> Session:
        """The offered tools and the system prompt as the guards make them."""
        session = Session(workspace=workspace, tools=tools, system_prompt=system_prompt)
        for guard in self.guards:
            guard.start_session(session)
        return session

    def set_up_tools(self, ctx: ToolContext) -> None:
        for guard in self.guards:
            guard.set_up_tools(ctx)

    def begin_turn(self, text: str, offered: ToolRegistry, ctx: ToolContext) -> list[Notice]:
        """Read the user's message ``text`` into :attr:`task`; the notices to show."""
        self.task = task = Task.read(text, offered, steps=self.steps)
        notices: list[Notice] = []
        for guard in self.guards:
            notices += guard.begin_turn(task, ctx)
        return notices

    @property
    def turn_tools(self) -> ToolRegistry:
        """The tools this turn's calls are checked against (after :meth:`begin_turn`)."""
        assert self.task is not None, "no turn has begun"
        return self.task.tools

    def before_request(self, plan: RequestPlan) -> None:
        if self.task is not None:
            for guard in self.guards:
                guard.before_request(plan, self.task)

    def after_reply(self, calls: list[CheckedCall]) -> None:
        if self.task is not None:
            for guard in self.guards:
                guard.after_reply(calls, self.task)

    def on_tool_result(self, call: CheckedCall, text: str, unfinished: bool = False) -> str:
        """``text`` as it joins the history (a reminder added, say)."""
        if self.task is None:
            return text
        result = ToolResult(call, text, unfinished)
        self.task.saw(result)
        for guard in self.guards:
            guard.on_tool_result(result, self.task)
        return result.text


__all__ = ["DEFAULT_GUARDS", "GuardFactory", "Scaffold"]
