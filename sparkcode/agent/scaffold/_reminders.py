"""``[agent] task_reminder``: every tool result ends with the turn's task, in the words
of :mod:`.prompts`, because a small model loses the task once a tool result follows it
(docs/experiments/2026-12-02-qwen-small-model-mode.md).

Which reminder: a question's (QUESTION_REMINDER), one saying a run is still due
(RUN_REMINDER, QUESTION_RUN_REMINDER), one saying a change is made (CHANGED_REMINDER,
not in a turn that asks for a run, nor after a change that left work: half a rename, a
new error), or one naming the files the task still asks to change
(NAMED_FILES_REMINDER); else TASK_REMINDER.
"""

from __future__ import annotations

from ..core.settings import AgentSettings
from ._guard import Guard, Task, ToolResult
from .prompts import (
    CHANGED_REMINDER,
    NAMED_FILES_REMINDER,
    QUESTION_REMINDER,
    QUESTION_RUN_REMINDER,
    RUN_REMINDER,
    TASK_REMINDER,
)


def reminder(result: ToolResult, task: Task) -> str:
    """The reminder for ``result`` in ``task``, formatted."""
    text = RUN_REMINDER if task.run_pending else TASK_REMINDER
    if task.question:
        text = QUESTION_RUN_REMINDER if task.run_pending else QUESTION_REMINDER
    elif result.edited and not task.runs_asked and not result.unfinished:
        text = CHANGED_REMINDER
        left = task.left_to_change()
        if left:
            text = NAMED_FILES_REMINDER.replace("{files}", left)
    return text.format(task=task.text)


class TaskReminders(Guard):
    def __init__(self, settings: AgentSettings) -> None:
        self.settings = settings

    def on_tool_result(self, result: ToolResult, task: Task) -> None:
        if self.settings.task_reminder:
            result.text += reminder(result, task)
