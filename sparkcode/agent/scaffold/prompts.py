"""Every text the small-model scaffolding adds to a conversation, in one place.

They are sent to the model (a reminder ends a tool result, a refusal is a result, the
loop nudge replaces one) or shown to the user (a notice), so a change of wording here
is a change of what a small model does: each was chosen by a measured trial, named at
the text. The braces are :meth:`str.format` fields (``{task}``; ``{files}`` is
replaced before formatting, as the reminders' own braces are doubled).
"""

from __future__ import annotations

TASK_REMINDER = (
    "\n\n(The task: {task}\nReply with the next step: another tool call, or "
    '{{"answer":"..."}} if the task is done.)'
)
"""Appended to every tool result with ``task_reminder``: a small model loses the task
once a tool result follows it (docs/experiments/2026-12-02-qwen-small-model-mode.md)."""
CHANGED_REMINDER = (
    "\n\n(The task: {task}\nThat change is made. If the task asks for nothing more (no "
    "other file, no test run), reply "
    '{{"answer":"..."}} saying what you did; otherwise make the next tool call.)'
)
"""TASK_REMINDER after a change that was made (a tool of kind ``edit`` that succeeded):
under TASK_REMINDER a small model went on editing a finished file
(docs/experiments/2026-12-02-agent-suite.md)."""
NAMED_FILES_REMINDER = (
    "\n\n(The task: {task}\nThat change is made. Next, the task asks for a change in "
    "{files}: make that change with a tool call.)"
)
"""CHANGED_REMINDER when the task asks to change files (``questions.files_to_change``)
that no edit of this turn has changed and the task does not keep: without it a small
model answered that it had added a test it never wrote; this wording was chosen by
replaying that step (docs/experiments/2026-12-02-agent-suite.md)."""
QUESTION_REMINDER = (
    '\n\n(The question: {task}\nNo file is to be changed. Reply {{"answer":"..."}} as soon '
    "as you know the answer; otherwise make the next tool call.)"
)
"""TASK_REMINDER for a question turn (``questions_read_only``)."""
RUN_REMINDER = (
    "\n\n(The task: {task}\nIt asks for a run that has not been made yet (bash). Reply "
    'with the next step: another tool call, or {{"answer":"..."}} if the task is done.)'
)
"""TASK_REMINDER while the task asks to run something (``questions.asks_a_run``) and no
``bash`` call has been made this turn: a small model answered without the run it was
told to make (docs/experiments/2026-12-02-agent-suite.md)."""
QUESTION_RUN_REMINDER = (
    "\n\n(The question: {task}\nNo file is to be changed. It asks for a run that has not "
    'been made yet: make it with bash, then reply {{"answer":"..."}} with what it showed.)'
)
"""QUESTION_REMINDER while the question's run has not been made (as RUN_REMINDER)."""
QUESTION_REFUSAL = (
    "this message only asks, so no file is changed this turn ([agent] "
    "questions_read_only); answer the question, or say what change the "
    "user would have to ask for"
)
"""The result of an edit call in a question turn when the tools are the API's: they stay
in the tool list (the template renders it before the history, docs/agent.md "Prefix
stability"), so such a call is refused by name instead."""
QUESTION_NOTICE = (
    "this message only asks, so the tools that edit files are left out of "
    "this turn ([agent] questions_read_only); ask for a change to have one made"
)
"""What the user is told at the start of a question turn (notice ``question_read_only``)."""
LOOP_NUDGE = (
    "you made this call several times in a row and its result, above, was the "
    "same each time. Do not repeat it: use what it showed (read or edit the file "
    "it points to), or give your answer."
)
"""The result of a looping call with ``loop_nudge`` (``_execute.TurnCalls``): without it
the loop question ended tries a small model could still finish
(docs/experiments/2026-12-02-agent-suite.md)."""
WORKSPACE_FILES_HEADING = "\n\nThe workspace's files:\n"
"""What precedes the listing that ``workspace_files`` ends the system prompt with."""

__all__ = [
    "CHANGED_REMINDER",
    "LOOP_NUDGE",
    "NAMED_FILES_REMINDER",
    "QUESTION_NOTICE",
    "QUESTION_REFUSAL",
    "QUESTION_REMINDER",
    "QUESTION_RUN_REMINDER",
    "RUN_REMINDER",
    "TASK_REMINDER",
    "WORKSPACE_FILES_HEADING",
]
