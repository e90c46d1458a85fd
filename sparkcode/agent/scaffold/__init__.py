"""The small-model scaffolding: what a conversation adds for a model that needs help.

A capable model needs none of it (every mechanism is off by default); the small-model
profiles turn them on (docs/agent.md "Small-model mode"). The conversation
(``core/loop.py``, ``core/_turn.py``) knows none of them: it calls its :class:`Scaffold` at
named points, and the policy hands each point to its guards, one module each:

- ``_hidden.py``: optional arguments the model is not shown (``hidden_arguments``);
- ``_edit_guards.py``: edits refused for a syntax error or a lost definition;
- ``_kept.py``: files the message says not to change (``keep_told_files``);
- ``_questions.py``: a message that only asks gets no edit tool (``questions_read_only``);
- ``_run_first.py``, ``_first_call.py``, ``_forced.py``: a request that must call a
  tool (``run_before_answer``, ``first_step_tool``, ``force_tool``);
- ``_steps.py``: every reply one JSON step under the engine's grammar
  (``structured_tools``, ``results_as_user``);
- ``_workspace_files.py``: the workspace's files in the system prompt;
- ``_reminders.py``: the task repeated after each tool result (``task_reminder``).

Their texts are in :mod:`.prompts`. A new guard is a :class:`Guard` subclass in its
own module, added to :data:`DEFAULT_GUARDS`.
"""

from __future__ import annotations

from ._forced import forced_specs
from ._guard import SHELL_CHANGES, Guard, RequestPlan, Session, Task, ToolResult
from ._policy import DEFAULT_GUARDS, GuardFactory, Scaffold
from ._questions import QUESTION_LEAVES_OUT
from ._run_first import RUN_BEFORE_ANSWER_REQUESTS
from .prompts import QUESTION_REFUSAL

__all__ = [
    "DEFAULT_GUARDS",
    "QUESTION_LEAVES_OUT",
    "QUESTION_REFUSAL",
    "RUN_BEFORE_ANSWER_REQUESTS",
    "SHELL_CHANGES",
    "Guard",
    "GuardFactory",
    "RequestPlan",
    "Scaffold",
    "Session",
    "Task",
    "ToolResult",
    "forced_specs",
]
