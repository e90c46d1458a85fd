"""``[agent] workspace_files``: the system prompt ends with the workspace's files as they
are when the session starts (as Gemini CLI's first context does), for a model that
guesses paths (docs/experiments/2026-12-02-agent-suite.md)."""

from __future__ import annotations

from ..core.settings import AgentSettings
from ..tools import workspace_listing
from ._guard import Guard, Session
from .prompts import WORKSPACE_FILES_HEADING


class WorkspaceFiles(Guard):
    def __init__(self, settings: AgentSettings) -> None:
        self.settings = settings

    def start_session(self, session: Session) -> None:
        if self.settings.workspace_files:
            session.system_prompt += WORKSPACE_FILES_HEADING + workspace_listing(session.workspace)
