"""``[agent] keep_told_files``: the files a message says not to change are refused to
the edit tools for that turn (``tools._kept``; the words are read by
``questions.kept_files``), and a notice says which."""

from __future__ import annotations

from collections.abc import Sequence

from ..core.events import Notice
from ..core.settings import AgentSettings
from ..tools import ToolContext
from ._guard import Guard, Task


class KeepToldFiles(Guard):
    def __init__(self, settings: AgentSettings) -> None:
        self.settings = settings

    def begin_turn(self, task: Task, ctx: ToolContext) -> Sequence[Notice]:
        kept = task.told_kept if self.settings.keep_told_files else None
        ctx.kept = kept or None
        return [Notice(message=kept.describe(), code="files_kept")] if kept else ()
