"""``[agent] refuse_syntax_errors`` and ``refuse_lost_definitions``: the edit tools
refuse a change that leaves a file unparsable (``tools._syntax``) or deletes
definitions the message does not name (``tools._lost``). The tools do the checking;
this guard only turns them on for the session."""

from __future__ import annotations

from ..core.settings import AgentSettings
from ..tools import ToolContext
from ._guard import Guard


class EditGuards(Guard):
    def __init__(self, settings: AgentSettings) -> None:
        self.settings = settings

    def set_up_tools(self, ctx: ToolContext) -> None:
        ctx.refuse_syntax_errors = self.settings.refuse_syntax_errors
        ctx.refuse_lost_definitions = self.settings.refuse_lost_definitions
