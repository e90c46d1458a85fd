"""Small-model mode: every reply is one JSON step, held to a schema by the engine.

A small model rarely writes a tool call the server's parser can read (or, like
SmolLM2, has no tool format at all). In this mode the tools are described in the
system prompt and each request carries vLLM's structured outputs: a JSON schema
that admits exactly ``{"tool": NAME, "arguments": {...}}`` for each real tool
(its own argument schema) or ``{"answer": TEXT}``. The engine's grammar then
makes every call well-formed and every tool name real; whether the call is a
good one is still up to the model. The step the model wrote stays in the
history as its text, so a template that renders no tool calls still shows the
model what it did.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..core.context import Message
from ..tools import ToolRegistry

NAME_KEYS: tuple[str, ...] = ("tool", "name")
"""The key that names the tool in a call step. ``name`` is the hermes shape Qwen
was trained on ({"name": ..., "arguments": ...}): held to ``tool``, Qwen wrote its
calls inside the answer (docs/experiments/2026-12-02-qwen-small-model-mode.md)."""


def step_schema(
    registry: ToolRegistry, name_key: str = "tool", *, answer: bool = True
) -> dict[str, Any]:
    """One of the tools with its arguments, or (``answer``) an answer."""
    options: list[dict[str, Any]] = []
    for spec in registry.specs():
        fn = spec["function"]
        params = dict(fn["parameters"])
        params["additionalProperties"] = False
        options.append(
            {
                "type": "object",
                "additionalProperties": False,
                "required": [name_key, "arguments"],
                "properties": {name_key: {"const": fn["name"]}, "arguments": params},
            }
        )
    if answer:
        options.append(
            {
                "type": "object",
                "additionalProperties": False,
                "required": ["answer"],
                "properties": {"answer": {"type": "string"}},
            }
        )
    return {"anyOf": options}


def structured_outputs(
    registry: ToolRegistry, name_key: str = "tool", *, answer: bool = True
) -> dict[str, Any]:
    """The request field (vLLM's ``structured_outputs``); no free whitespace, so a
    weak model cannot pad the JSON until max_tokens. Without ``answer`` the step
    must be a tool call (a turn's first step, where a small model otherwise
    answers from the prompt alone)."""
    return {"json": step_schema(registry, name_key, answer=answer), "disable_any_whitespace": True}


WHOLE_FILE_NOTE = (
    "To change a file: read it, then write_file it with its whole new "
    "content, every line of it, changed or not."
)
"""Added when the tools can write a file but not edit one (a profile's ``tools`` without
``edit_file``): the whole-file edit format, which Aider found weak models use best."""


def tools_prompt(registry: ToolRegistry, name_key: str = "tool") -> str:
    """What the system prompt adds: the reply format and each tool's arguments.

    The examples are written without spaces, as the grammar makes the model write
    them (``disable_any_whitespace``): shown spaces, a small model reached for them and,
    held to ``":``, wrote ``{"answer":"}"}`` (docs/experiments/2026-12-02-agent-suite.md)."""
    lines = [
        "",
        "",
        "Reply with exactly one JSON object each time. To use a tool: "
        f'{{"{name_key}":"NAME","arguments":{{...}}}}; you then get its result. When '
        'the task is done: {"answer":"what you did or found"}. Tools:',
    ]
    for spec in registry.specs():
        fn = spec["function"]
        props = fn["parameters"].get("properties", {})
        required = set(fn["parameters"].get("required", []))
        args = ", ".join(
            f"{k}{'' if k in required else '?'}: {v.get('type', 'any')}" for k, v in props.items()
        )
        lines.append(f"- {fn['name']}({args}): {fn['description']}")
    names = registry.names
    if "write_file" in names and "edit_file" not in names and "multi_edit" not in names:
        lines.append(WHOLE_FILE_NOTE)
    return "\n".join(lines)


RESULT_PREFIX = "Result:\n"
"""What a tool result starts with when it is sent as a user message (``results_as_user``)."""


def results_as_user(history: list[Message], name_key: str = "tool") -> list[Message]:
    """The history as a small-model mode request sends it with ``results_as_user``: each
    step as the model wrote it, its result a user message that begins "Result:".

    Sent as the API's tool messages, Qwen's template renders a step twice (the JSON it
    wrote, then the call again in ``<tool_call>`` tags) and its result in
    ``<tool_response>`` tags, a form the schema never lets the model write; as user
    messages the results led to sensible next steps
    (docs/experiments/2026-12-02-agent-suite.md). The history itself stays the API's
    form (every call with its result); only the request differs, the same way every
    time, so the prompt prefix stays cacheable.
    """
    out: list[Message] = []
    for msg in history:
        if msg.get("role") == "assistant" and msg.get("tool_calls"):
            content = msg.get("content") or ""
            if not content:  # a call the server parsed: show it as a step
                content = "\n".join(_step_json(c, name_key) for c in msg["tool_calls"])
            out.append({k: v for k, v in msg.items() if k != "tool_calls"} | {"content": content})
        elif msg.get("role") == "tool":
            out.append({"role": "user", "content": RESULT_PREFIX + str(msg.get("content", ""))})
        else:
            out.append(msg)
    return out


def _step_json(call: dict[str, Any], name_key: str) -> str:
    fn = call.get("function", {})
    try:
        args = json.loads(fn.get("arguments") or "{}")
    except ValueError:
        args = fn.get("arguments")
    return json.dumps(
        {name_key: fn.get("name", ""), "arguments": args}, ensure_ascii=False, separators=(",", ":")
    )


@dataclass(frozen=True)
class Step:
    """A reply read as a step: a call (``tool`` + ``arguments`` JSON) or an answer."""

    tool: str | None = None
    arguments: str = "{}"
    answer: str | None = None


def read_step(text: str) -> Step | None:
    """The step in ``text``; None when it is not one (e.g. cut by max_tokens)."""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("answer"), str):
        return Step(answer=obj["answer"])
    name = next((obj[k] for k in NAME_KEYS if isinstance(obj.get(k), str)), None)
    if name is not None and isinstance(obj.get("arguments"), dict):
        return Step(tool=name, arguments=json.dumps(obj["arguments"], ensure_ascii=False))
    return None
