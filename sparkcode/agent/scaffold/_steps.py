"""``[agent] structured_tools`` (small-model mode, ``_structured``): the tools are
described in the system prompt and every reply is one JSON step held to the tools'
schemas by vLLM's ``structured_outputs``; with ``results_as_user`` each result is sent
as a user message after the step as the model wrote it.

The mode is fixed when the session starts (the system prompt says it). A request that
must call a tool (the turn's first with ``first_step_tool``, one while a run is due,
:attr:`RequestPlan.run_first`) gets the schema without an answer; a question turn's
schema leaves the edit tools out (the questions guard narrows ``task.tools``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.events import Notice
from ..core.settings import AgentSettings
from ..tools import ToolContext
from ._guard import Guard, RequestPlan, Session, Task
from .structured import results_as_user, structured_outputs, tools_prompt


class StructuredSteps(Guard):
    def __init__(self, settings: AgentSettings) -> None:
        self.settings = settings
        self.steps = settings.structured_tools
        self._any: dict[str, Any] | None = None
        """The session's schema: a call of any tool, or an answer."""
        self._first: dict[str, Any] | None = None
        """The session's schema without an answer (``first_step_tool``)."""
        self._turn_any: dict[str, Any] | None = None
        self._turn_first: dict[str, Any] | None = None

    def start_session(self, session: Session) -> None:
        if not self.steps:
            return
        key = self.settings.step_name_key
        self._any = structured_outputs(session.tools, key)
        if self.settings.first_step_tool:
            self._first = structured_outputs(session.tools, key, answer=False)
        session.system_prompt += tools_prompt(session.tools, key)

    def begin_turn(self, task: Task, ctx: ToolContext) -> Sequence[Notice]:
        self._turn_any, self._turn_first = self._any, self._first
        if self.steps and task.question:  # the edit tools out of the grammar
            key = self.settings.step_name_key
            self._turn_any = structured_outputs(task.tools, key)
            if self._turn_first is not None:
                self._turn_first = structured_outputs(task.tools, key, answer=False)
        return ()

    def before_request(self, plan: RequestPlan, task: Task) -> None:
        if not self.steps:
            return
        # The tools are in the system prompt; the schema is the only call format.
        plan.tools = []
        key = self.settings.step_name_key
        if plan.run_first:
            self._turn_first = self._turn_first or structured_outputs(task.tools, key, answer=False)
        first = self._turn_first
        plan.params["structured_outputs"] = (
            first if (plan.number == 1 or plan.run_first) and first else self._turn_any
        )
        if self.settings.results_as_user:
            plan.messages = results_as_user(plan.messages, key)
