"""The ``task`` tool: a read-only explore sub-conversation that returns a summary.

Exploring a large repository fills the context the task needs; the model can
instead hand a question to a sub-conversation (``task(prompt=...)``) and get
back only its answer. The sub-conversation is another :class:`~.loop.Agent`
on the same engine and client, with:

- the same system prompt and the same tool list, byte for byte, so its first
  request shares the conversation's prompt prefix and the engine's prefix cache
  serves it (the explore instructions go in its user message, as plan mode's);
- the read-only rule of plan mode (:meth:`.permissions.Permissions.read_only`):
  edits, writes, commits, MCP tools, ``web_fetch`` and shell commands that are
  not read-only are refused with :data:`TASK_REFUSAL`; the config's deny rules
  still apply; nothing asks the user (a question, such as the loop guard's, is
  answered no by :func:`_no_one_to_ask`);
- no hooks, no undo snapshots (nothing changes), its own todo list, no ``task``
  of its own (one at a time, never nested);
- at most ``settings.task_max_requests`` model requests.

Its events reach the front wrapped in :class:`~.events.TaskEvent` (the TUI
shows them inside the task's tool card; ``run --json`` prints them; the
recorder writes them), and its requests carry
:data:`~._chat_types.TASK_HEADER`, so the recording tells them from the
conversation's when a session is resumed or played back. Cancelling the turn
cancels the sub-conversation. How it ended becomes the tool's result: its
answer, or an error naming why there is none.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .events import AgentError, ApprovalDecision, ApprovalRequested, Event, TurnFinished
from .tools import Tool, ToolContext, ToolError, ToolOutput, cap_output

if TYPE_CHECKING:
    from .loop import Agent

TASK_TOOL = "task"
TASK_NOTE = (
    "\n\n[You are an explore subagent working for another agent, which sees only your "
    "final answer. Only read-only tools run: read, search and list files, read-only shell "
    "commands and git queries; nothing can be changed. Investigate what is asked, then "
    "answer with a concise summary of what you found: the relevant files, functions and "
    "line numbers, and the facts asked for.]"
)
"""Appended to the task's prompt, as plan mode's note is (the system prompt stays the
conversation's)."""
TASK_REFUSAL = ("an explore task is read-only: this call would change something, so it was "
                "not run. Do not retry it: investigate with read-only tools and answer with "
                "what you found")
_REASONS = {
    "max_turns": "it used all its model requests ({cap}) without a final answer",
    "loop": "it repeated the same calls",
    "degenerate": "its output degenerated (looping or garbled text)",
    "length": "its answer hit the output token limit",
}


class TaskTool(Tool):
    """``task``: hand a question to a read-only sub-conversation (:class:`Explorer`)."""

    def __init__(self) -> None:
        super().__init__(
            name=TASK_TOOL,
            description="Run a read-only explore subagent on a question about the workspace "
                        "(where something is defined, how a part works, which files matter) "
                        "and get back only its summary, keeping your own context small. It "
                        "can read, search and run read-only commands, never change anything. "
                        "One task at a time.",
            parameters={
                "description": {"type": "string",
                                "description": "A few words naming the task (shown to the "
                                               "user)."},
                "prompt": {"type": "string",
                           "description": "The question or investigation, with all the "
                                          "context the subagent needs: it does not see "
                                          "this conversation."},
            },
            kind="read", required=("prompt",))

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        output: ToolOutput | None = None
        async for item in self.stream(args, ctx):
            if isinstance(item, ToolOutput):
                output = item
        assert output is not None  # stream ends with the output or raises
        return output

    async def stream(self, args: dict[str, Any],
                     ctx: ToolContext) -> AsyncIterator[Event | ToolOutput]:
        prompt = args.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise ToolError("prompt must be a non-empty string: the question for the subagent")
        if ctx.explore is None:
            raise ToolError("task is not available inside an explore task; investigate with "
                            "the read-only tools yourself")
        async for item in ctx.explore(prompt.strip(), ctx.call_id):
            yield ToolOutput(cap_output(item.text, ctx.output_cap)) \
                if isinstance(item, ToolOutput) else item


async def _no_one_to_ask(request: ApprovalRequested) -> ApprovalDecision:
    """Inside a task nothing asks the user: a question is answered no, by rule."""
    return ApprovalDecision(approved=False, by="rule",
                            reason="an explore task cannot ask the user; it stays read-only "
                                   "and inside the sandbox")


class Explorer:
    """Runs the ``task`` tool's sub-conversations for one agent, one at a time."""

    def __init__(self, parent: Agent) -> None:
        self.parent = parent
        self.child: Agent | None = None
        """The sub-conversation running now, if any."""

    def cancel(self) -> None:
        if self.child is not None:
            self.child.cancel()

    def _child(self, call_id: str) -> Agent:
        parent = self.parent
        settings = replace(parent.settings, max_turns=parent.settings.task_max_requests,
                           force_tool=None, force_tool_parameters=None, workspace_files=False)
        child = type(parent)(
            parent.client.for_task(call_id), parent.workspace, settings=settings,
            permissions=parent.permissions.read_only(TASK_REFUSAL, TASK_NOTE),
            tools=parent.tools,
            approver=_no_one_to_ask)
        # The conversation's system prompt as it is (skills, instructions, tools prompt
        # and file list included): the shared prefix.
        child.history = [dict(parent.history[0])]
        child.requests_sent = parent.requests_sent  # one sequence of derived seeds
        child.explorer = None  # one at a time: no task inside a task
        child._ctx.explore = None
        return child

    async def __call__(self, prompt: str, call_id: str) -> AsyncIterator[Event | ToolOutput]:
        parent = self.parent
        if self.child is not None:
            raise ToolError("another explore task is running; wait for its summary")
        if parent.cancelled:
            raise ToolError("the turn was cancelled before the explore task started")
        child = self.child = self._child(call_id)
        finished: TurnFinished | None = None
        error: AgentError | None = None
        try:
            async for event in child.run_turn(prompt):
                if parent.cancelled and not child.cancelled:
                    child.cancel()  # a cancel that came before the child's turn began
                if isinstance(event, AgentError):
                    error = event
                elif isinstance(event, TurnFinished):
                    finished = event
                yield event
        finally:
            self.child = None
            parent.requests_sent = child.requests_sent
        yield ToolOutput(_result(finished, error, child.settings.max_turns))


def _result(finished: TurnFinished | None, error: AgentError | None, cap: int) -> str:
    """The sub-conversation's answer, or a :class:`ToolError` saying why there is none."""
    if finished is None or finished.reason == "cancelled":
        raise ToolError("the explore task was cancelled")
    answer = finished.content.strip()
    if finished.reason == "error":
        why = error.message if error is not None else "the request failed"
        raise ToolError(f"the explore task failed: {why}")
    if finished.reason == "stop" and answer:
        return answer
    if finished.reason == "stop":
        raise ToolError("the explore task ended without an answer")
    why = _REASONS.get(finished.reason, f"it stopped ({finished.reason})").format(cap=cap)
    said = f"; its last words: {answer}" if answer else ""
    raise ToolError(f"the explore task has no summary: {why}{said}")


__all__ = ["TASK_NOTE", "TASK_REFUSAL", "TASK_TOOL", "Explorer", "TaskTool"]
