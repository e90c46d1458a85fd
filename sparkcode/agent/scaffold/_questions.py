"""``[agent] questions_read_only``: a message that only asks (``questions.is_question``)
is offered no tool of kind ``edit`` that turn.

A small model asked about a file edited it, and no prompt wording tried stopped that
(docs/experiments/2026-12-02-agent-suite.md). In small-model mode the edit tools leave
the step schema (the grammar; the prompt is unchanged); with the API's tools they stay
in the list (the template renders it before the history) and a call of one is refused
by name (:data:`~.prompts.QUESTION_REFUSAL`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core.calls import CheckedCall
from ..core.events import Notice
from ..core.settings import AgentSettings
from ..tools import ToolContext
from ._guard import Guard, Task
from .message_words import is_question
from .prompts import QUESTION_NOTICE, QUESTION_REFUSAL

QUESTION_LEAVES_OUT = frozenset({"edit"})
"""The tool kinds a question turn is not offered (write_file, edit_file, multi_edit)."""


class QuestionsReadOnly(Guard):
    def __init__(self, settings: AgentSettings) -> None:
        self.settings = settings

    def begin_turn(self, task: Task, ctx: ToolContext) -> Sequence[Notice]:
        task.question = self.settings.questions_read_only and is_question(task.text)
        if not task.question:
            return ()
        task.tools = task.offered.without_kinds(QUESTION_LEAVES_OUT)
        return [Notice(message=QUESTION_NOTICE, code="question_read_only")]

    def after_reply(self, calls: list[CheckedCall], task: Task) -> None:
        if not task.question or task.steps:
            return
        for call in calls:
            if call.tool is None and task.offered.get(call.name) is not None:
                call.error = QUESTION_REFUSAL
