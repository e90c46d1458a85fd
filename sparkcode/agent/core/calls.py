"""Validation of the model's tool calls before anything runs.

A malformed call (arguments that are not a JSON object, an unknown tool, a
missing required argument, an argument of the wrong type) becomes an error
result for the model, and the
call is written to the history with ``"{}"`` arguments: vLLM answers a history
holding non-JSON arguments with HTTP 400, so the raw text is never sent back.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from ..tools import Tool, ToolRegistry
from ..wire.client import ToolCall


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
        return {
            "id": self.call_id,
            "type": "function",
            "function": {"name": self.name or "invalid", "arguments": self.history_arguments},
        }


def check_call(call: ToolCall, registry: ToolRegistry) -> CheckedCall:
    raw = call.arguments or ""
    name = call.name.strip()
    checked = CheckedCall(
        call_id=call.id, name=name, raw_arguments=raw, args={}, history_arguments="{}"
    )
    try:
        parsed = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        checked.error = (
            f"the arguments of your {name or 'tool'} call are not valid JSON "
            f"({exc.msg} at position {exc.pos}); call the tool again with a JSON "
            "object of arguments"
        )
        return checked
    if not isinstance(parsed, dict):
        checked.error = (
            f"the arguments of your {name or 'tool'} call must be a JSON object, "
            f"got {type(parsed).__name__}; call it again with an object"
        )
        return checked
    checked.args = parsed
    checked.history_arguments = json.dumps(parsed, ensure_ascii=False, sort_keys=True)
    tool = registry.get(name)
    if tool is None:
        checked.error = (
            f"there is no tool named {name!r}; the tools are: {', '.join(registry.names)}"
        )
        return checked
    # null for an optional argument means "not given" (weak models send it).
    parsed = {k: v for k, v in parsed.items() if v is not None or k in tool.required}
    missing = [r for r in tool.required if parsed.get(r) is None]
    if missing:
        checked.error = (
            f"{name} needs the argument(s) {', '.join(missing)}; call it again "
            "with all required arguments"
        )
        return checked
    for key, value in list(parsed.items()):
        schema = tool.parameters.get(key)
        if isinstance(schema, dict):
            try:
                parsed[key] = coerce(value, schema)
            except ValueError as exc:
                checked.error = (
                    f"the argument {key!r} of {name} {exc}; call it again with the right type"
                )
                return checked
    checked.args = parsed
    checked.history_arguments = json.dumps(parsed, ensure_ascii=False, sort_keys=True)
    checked.tool = tool
    return checked


_INT = re.compile(r"-?\d{1,18}")


def coerce(value: Any, schema: dict[str, Any]) -> Any:
    """``value`` as the JSON-schema ``type`` asks, converting the forms weak
    models send ("5" for 5, "true" for true); ValueError says what was wrong."""
    kind = schema.get("type")
    got = type(value).__name__
    if kind == "string":
        if not isinstance(value, str):
            raise ValueError(f"must be a string, got {got} {_short(value)}")
    elif kind == "integer":
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and _INT.fullmatch(value.strip()):
            return int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"must be an integer, got {got} {_short(value)}")
    elif kind == "number":
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                number = math.nan
            if math.isfinite(number):
                return number
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"must be a number, got {got} {_short(value)}")
    elif kind == "boolean":
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if not isinstance(value, bool):
            raise ValueError(f"must be true or false, got {got} {_short(value)}")
    elif kind == "array":
        if not isinstance(value, list):
            raise ValueError(f"must be an array, got {got} {_short(value)}")
        items = schema.get("items")
        if isinstance(items, dict):
            return [coerce(v, items) for v in value]
    elif kind == "object" and not isinstance(value, dict):
        raise ValueError(f"must be an object, got {got} {_short(value)}")
    return value


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."
