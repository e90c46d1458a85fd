"""``[agent] force_tool``: the turn's first request names a tool in ``tool_choice``
(scripted runs: a random model's first call is then the named one, well-formed).
Small-model mode's schema takes its place there."""

from __future__ import annotations

from typing import Any

from ..core.settings import AgentSettings
from ._guard import Guard, RequestPlan, Task


def forced_specs(specs: list[dict[str, Any]], settings: AgentSettings) -> list[dict[str, Any]]:
    """The tool list with ``settings.force_tool`` marked strict (and narrowed).

    vLLM (0.32, hermes and other structural-tag parsers) constrains only the call
    envelope of a named tool_choice; the arguments follow the tool's schema only
    when the tool is marked strict (measured: without it a random model's
    arguments came back as `true`).
    """
    schema = settings.force_tool_parameters
    out = []
    for spec in specs:
        if spec["function"]["name"] == settings.force_tool:
            function = {**spec["function"], "strict": True}
            if schema is not None:
                function["parameters"] = schema
            spec = {**spec, "function": function}
        out.append(spec)
    return out


class ForcedTool(Guard):
    def __init__(self, settings: AgentSettings) -> None:
        self.settings = settings

    def before_request(self, plan: RequestPlan, task: Task) -> None:
        if task.steps or not self.settings.force_tool or plan.number != 1:
            return
        plan.choice = {"type": "function", "function": {"name": self.settings.force_tool}}
        plan.tools = forced_specs(plan.tools, self.settings)
