"""Validation of the model's tool calls before anything runs.

A malformed call (arguments that are not a JSON object, an unknown tool, a
missing required argument) becomes an error result for the model, and the
call is written to the history with ``"{}"`` arguments: vLLM answers a history
holding non-JSON arguments with HTTP 400, so the raw text is never sent back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .client import ToolCall
from .tools import Tool, ToolRegistry


@dataclass
class CheckedCall:
    """A tool call after validation: either ``tool``+``args`` or ``error``."""

    call_id: str
    name: str
    raw_arguments: str
    args: dict[str, Any]
    history_arguments: str
    """What goes back into the history: canonical JSON, ``"{}"`` if malformed."""
    tool: Tool | None = None
    error: str | None = None

    @property
    def signature(self) -> str:
        """Identity for loop detection (same tool, same arguments)."""
        return f"{self.name}\x00{self.history_arguments}"

    def history_entry(self) -> dict[str, Any]:
        return {"id": self.call_id, "type": "function",
                "function": {"name": self.name or "invalid", "arguments": self.history_arguments}}


def check_call(call: ToolCall, registry: ToolRegistry) -> CheckedCall:
    raw = call.arguments or ""
    name = call.name.strip()
    checked = CheckedCall(call_id=call.id, name=name, raw_arguments=raw, args={},
                          history_arguments="{}")
    try:
        parsed = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        checked.error = (f"the arguments of your {name or 'tool'} call are not valid JSON "
                         f"({exc.msg} at position {exc.pos}); call the tool again with a JSON "
                         "object of arguments")
        return checked
    if not isinstance(parsed, dict):
        checked.error = (f"the arguments of your {name or 'tool'} call must be a JSON object, "
                         f"got {type(parsed).__name__}; call it again with an object")
        return checked
    checked.args = parsed
    checked.history_arguments = json.dumps(parsed, ensure_ascii=False, sort_keys=True)
    tool = registry.get(name)
    if tool is None:
        checked.error = (f"there is no tool named {name!r}; the tools are: "
                         f"{', '.join(registry.names)}")
        return checked
    missing = [r for r in tool.required if r not in parsed]
    if missing:
        checked.error = (f"{name} needs the argument(s) {', '.join(missing)}; call it again "
                         "with all required arguments")
        return checked
    checked.tool = tool
    return checked
