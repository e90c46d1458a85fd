"""The todo tool: the model keeps a short list of steps the user watches live.

The list belongs to the session (:class:`~._base.TodoList`, on the tool
context), not to the workspace, so the tool runs in every mode, plan mode included, and
switching from plan to act keeps it.
"""

from __future__ import annotations

from typing import Any, cast

from ..core.events import TODO_STATUSES, TodoStatus
from ._base import Tool, ToolContext, ToolError, ToolOutput


class Todo(Tool):
    def __init__(self) -> None:
        super().__init__(
            name="todo",
            description="Keep the todo list of the current task, which the user sees live. "
            "action 'add' appends items (one short step each), 'update' sets an "
            "item's status (pending, in_progress, done) or text by id, 'list' "
            "shows it. Add the steps before starting; mark each in_progress and "
            "done as you go.",
            parameters={
                "action": {"type": "string", "enum": ["add", "update", "list"]},
                "items": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "For add: the new items' texts.",
                },
                "id": {"type": "integer", "description": "For update: the item's number."},
                "status": {"type": "string", "enum": list(TODO_STATUSES)},
                "text": {"type": "string", "description": "For update: a new text."},
            },
            kind="state",
            required=("action",),
        )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        todos = ctx.todos
        action = args["action"]
        if action == "add":
            items = args.get("items")
            text = args.get("text")
            if not items and isinstance(text, str) and text.strip():
                # One item in ``text``: what SmolLM2 writes in small-model mode
                # (greedy, 3 of 4 prompts in a row of ``{"action":"add","text":...}``).
                items = [text]
            if not items or not all(isinstance(t, str) and t.strip() for t in items):
                raise ToolError("add needs items: a list of non-empty texts")
            todos.add([t.strip() for t in items])
        elif action == "update":
            item_id = args.get("id")
            if not isinstance(item_id, int) or isinstance(item_id, bool):
                raise ToolError("update needs id: the item's number")
            status = args.get("status")
            text = args.get("text")
            if status is None and not text:
                raise ToolError("update needs a status (pending, in_progress, done) or a text")
            if status is not None and status not in TODO_STATUSES:
                raise ToolError(f"status must be one of {', '.join(TODO_STATUSES)}, got {status!r}")
            todos.update(
                item_id,
                cast("TodoStatus | None", status),
                text.strip() if isinstance(text, str) else None,
            )
        elif action != "list":
            raise ToolError(f"action must be add, update or list, got {action!r}")
        return ToolOutput(todos.render())
