"""``[agent] run_before_answer``: while the message asks to run something
(``questions.asks_a_run``) and no ``bash`` call has run, the turn's first
:data:`RUN_BEFORE_ANSWER_REQUESTS` requests cannot answer (small-model mode: no answer in
the step schema, which the steps guard reads from :attr:`RequestPlan.run_first`;
otherwise ``tool_choice: "required"``). RUN_REMINDER alone did not stop a small model
answering first (docs/experiments/2026-12-02-agent-suite.md)."""

from __future__ import annotations

from ..core.settings import AgentSettings
from ._guard import Guard, RequestPlan, Task

RUN_BEFORE_ANSWER_REQUESTS = 4
"""With ``run_before_answer``, the requests of a turn that may not answer while the run
it asks for is still to be made: enough for a read, an edit and the run; after them the
model may answer (a turn that cannot run anything must still end)."""


class RunBeforeAnswer(Guard):
    def __init__(self, settings: AgentSettings) -> None:
        self.settings = settings

    def before_request(self, plan: RequestPlan, task: Task) -> None:
        plan.run_first = (
            self.settings.run_before_answer
            and task.run_pending
            and plan.number <= RUN_BEFORE_ANSWER_REQUESTS
        )
        if plan.run_first and not task.steps:
            plan.choice = "required"
