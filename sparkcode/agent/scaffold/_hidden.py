"""``[agent] hidden_arguments``: optional arguments the model is not shown.

A small model set them to its harm (docs/experiments/2026-12-02-agent-suite.md), so
their specs leave them out (``ToolRegistry.hiding``; their defaults apply) and the
tools' error messages do not tell the model to set them.
"""

from __future__ import annotations

from ..core.settings import AgentSettings
from ..tools import ToolContext
from ._guard import Guard, Session


class HiddenArguments(Guard):
    def __init__(self, settings: AgentSettings) -> None:
        self.settings = settings

    def start_session(self, session: Session) -> None:
        if self.settings.hidden_arguments:
            session.tools = session.tools.hiding(self.settings.hidden_arguments)

    def set_up_tools(self, ctx: ToolContext) -> None:
        ctx.hidden_arguments = frozenset(self.settings.hidden_arguments)
