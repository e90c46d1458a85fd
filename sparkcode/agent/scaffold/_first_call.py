"""``[agent] first_step_tool``: a turn's first request must call a tool, where a small
model otherwise answers from the prompt alone. With the API's tools it is sent with
``tool_choice: "required"``; in small-model mode the steps guard sends the schema
without an answer instead."""

from __future__ import annotations

from ..core.settings import AgentSettings
from ._guard import Guard, RequestPlan, Task


class FirstStepTool(Guard):
    def __init__(self, settings: AgentSettings) -> None:
        self.settings = settings

    def before_request(self, plan: RequestPlan, task: Task) -> None:
        if not task.steps and self.settings.first_step_tool and plan.number == 1:
            plan.choice = "required"
