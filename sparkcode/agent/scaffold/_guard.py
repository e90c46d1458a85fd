"""What a guard is: one small-model mechanism, and the hooks the loop calls it at.

A :class:`Guard` overrides only the hooks it acts at; each gets what it needs as
arguments (the turn's :class:`Task`, the :class:`RequestPlan` being made, the
:class:`ToolResult` being recorded), never the agent. The facts several guards read
(does the message only ask, does it ask for a run not made yet, which files it asks to
change) are read once per turn into the :class:`Task` by the policy, so that a guard
needs no other guard to be there.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from ..core.calls import CheckedCall
from ..core.context import Message
from ..core.events import Notice
from ..tools import KeptFiles, ToolContext, ToolRegistry
from .message_words import asks_a_run, files_to_change, kept_files

SHELL_CHANGES = re.compile(r"\b(?:mv|rm|cp|touch|tee|sed\s+-i)\b|(?:^|[^\d&>])>{1,2}(?!&)")
"""A shell command that moves, removes or writes files (a redirection to a file, not
``2>&1`` or ``2>/dev/null``): the named files it mentions count as changed
(:attr:`Task.changed`)."""


@dataclass
class Session:
    """What a session starts with, which a guard may change before the first turn."""

    workspace: Path
    tools: ToolRegistry
    """The tools offered to the model."""
    system_prompt: str


@dataclass
class Task:
    """The turn's message as the guards read it, and what the turn has done so far."""

    text: str
    offered: ToolRegistry
    """Every tool the conversation offers (the list every request sends)."""
    tools: ToolRegistry
    """The tools this turn's calls are checked against (a question's are narrower)."""
    steps: bool
    """Small-model mode: every reply is one JSON step (``_structured``)."""
    told_kept: KeptFiles
    """The files the message says not to change (``questions.kept_files``)."""
    runs_asked: bool
    """The message asks to run something (``questions.asks_a_run``)."""
    run_pending: bool
    """The message asks to run something and no ``bash`` call has run yet."""
    to_change: tuple[str, ...]
    """Files the message asks to change and does not keep (``questions.files_to_change``)."""
    question: bool = False
    """The message only asks (set by the questions guard under ``questions_read_only``)."""
    changed: set[str] = field(default_factory=set)
    """Names (last path part) of the files this turn's edits have changed."""

    @classmethod
    def read(cls, text: str, offered: ToolRegistry, *, steps: bool) -> Task:
        told = kept_files(text)
        asked = asks_a_run(text)
        return cls(
            text=text,
            offered=offered,
            tools=offered,
            steps=steps,
            told_kept=told,
            runs_asked=asked,
            run_pending=asked,
            to_change=tuple(name for name in files_to_change(text) if told.why(name) is None),
        )

    def saw(self, result: ToolResult) -> None:
        """Update the facts for a call's result: a run made, files changed."""
        call = result.call
        if result.ran and call.tool is not None and call.tool.kind == "shell":
            self.run_pending = False
            command = str(call.args.get("command", ""))
            if SHELL_CHANGES.search(command):  # git mv helpers.py textutil.py
                self.changed.update(
                    PurePosixPath(name).name for name in self.to_change if name in command
                )
        path = call.args.get("path")
        if result.edited and isinstance(path, str):
            self.changed.add(PurePosixPath(path).name)

    def left_to_change(self) -> str:
        """The files the task asks to change that no edit of this turn has changed yet,
        as words ("a.py and b.py"); "" when none is left."""
        left = [name for name in self.to_change if PurePosixPath(name).name not in self.changed]
        return " and ".join(filter(None, (", ".join(left[:-1]), left[-1]))) if left else ""


@dataclass
class RequestPlan:
    """One request of the turn as the loop is about to send it; guards may change it."""

    number: int
    """The request's number in the turn, from 1."""
    tools: list[dict[str, Any]]
    """The tool specs sent (the whole list by default: the template renders it before
    the history, so a narrower list would break the cached prefix)."""
    params: dict[str, Any]
    """The body's other fields (sampling, effort, budget, ``structured_outputs``)."""
    messages: list[Message]
    """The history as sent."""
    choice: Any = "auto"
    """``tool_choice``."""
    run_first: bool = False
    """This request may not answer: the run the message asks for is still to be made
    (set by the run-before-answer guard)."""


@dataclass
class ToolResult:
    """A call's result on its way into the history; a guard may add to :attr:`text`."""

    call: CheckedCall
    text: str
    unfinished: bool = False
    """An edit that left work (:attr:`~sparkcode.agent.tools.ToolOutput.unfinished`)."""
    ran: bool = field(init=False)
    """The tool ran (its result, as the tool gave it, is no error, refusal or not-run)."""

    def __post_init__(self) -> None:
        self.ran = self.call.tool is not None and not self.text.startswith(
            ("error:", "refused:", "not run:")
        )

    @property
    def edited(self) -> bool:
        """A tool of kind ``edit`` ran."""
        return self.ran and self.call.tool is not None and self.call.tool.kind == "edit"


class Guard:
    """One small-model mechanism. Every hook does nothing here; a guard overrides those
    it acts at. The policy calls each guard's hook in the policy's order."""

    steps = False
    """Replies are JSON steps while this guard is on (small-model mode)."""

    def start_session(self, session: Session) -> None:
        """The agent is being made: change the offered tools or the system prompt."""

    def set_up_tools(self, ctx: ToolContext) -> None:
        """The tools' context is made (once per session): set what the tools check."""

    def begin_turn(self, task: Task, ctx: ToolContext) -> Sequence[Notice]:
        """A user message starts a turn (before it joins the history): read it, narrow
        ``task.tools``, set the tools' context for the turn; the notices are shown."""
        return ()

    def before_request(self, plan: RequestPlan, task: Task) -> None:
        """A request is about to be sent."""

    def after_reply(self, calls: list[CheckedCall], task: Task) -> None:
        """A reply's calls were read, before any runs: refuse some (``call.error``)."""

    def on_tool_result(self, result: ToolResult, task: Task) -> None:
        """A call's result is about to join the history: add to ``result.text``."""


__all__ = ["SHELL_CHANGES", "Guard", "RequestPlan", "Session", "Task", "ToolResult"]
