"""``task``: hand a question to a read-only explore sub-conversation.

The tool only checks its arguments and hands the prompt to
:attr:`ToolContext.explore`, which the agent sets
(:class:`~sparkcode.agent.core.subagent.Explorer` runs the sub-conversation and
yields its events, then the summary); inside a sub-conversation there is none,
so a task cannot start another.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from ..core.events import Event
from ._base import Tool, ToolContext, ToolError, ToolOutput, cap_output

TASK_TOOL = "task"


class TaskTool(Tool):
    """``task``: hand a question to a read-only sub-conversation (``subagent.Explorer``)."""

    def __init__(self) -> None:
        super().__init__(
            name=TASK_TOOL,
            description="Run a read-only explore subagent on a question about the workspace "
            "(where something is defined, how a part works, which files matter) "
            "and get back only its summary, keeping your own context small. It "
            "can read, search and run read-only commands, never change anything. "
            "One task at a time.",
            parameters={
                "description": {
                    "type": "string",
                    "description": "A few words naming the task (shown to the user).",
                },
                "prompt": {
                    "type": "string",
                    "description": "The question or investigation, with all the "
                    "context the subagent needs: it does not see "
                    "this conversation.",
                },
            },
            kind="read",
            required=("prompt",),
        )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        output: ToolOutput | None = None
        async for item in self.stream(args, ctx):
            if isinstance(item, ToolOutput):
                output = item
        assert output is not None  # stream ends with the output or raises
        return output

    async def stream(
        self, args: dict[str, Any], ctx: ToolContext
    ) -> AsyncIterator[Event | ToolOutput]:
        prompt = args.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise ToolError("prompt must be a non-empty string: the question for the subagent")
        if ctx.explore is None:
            raise ToolError(
                "task is not available inside an explore task; investigate with "
                "the read-only tools yourself"
            )
        async for item in ctx.explore(prompt.strip(), ctx.call_id):
            yield (
                ToolOutput(cap_output(item.text, ctx.output_cap))
                if isinstance(item, ToolOutput)
                else item
            )


__all__ = ["TASK_TOOL", "TaskTool"]
