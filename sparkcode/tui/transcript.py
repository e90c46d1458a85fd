"""Draw a conversation from its messages: a resumed session, or the history after /undo."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sparkcode.agent.core.images import content_text
from sparkcode.agent.scaffold.step_text import shown_text

from .widgets.conversation import Conversation


async def show_transcript(conversation: Conversation, messages: Sequence[dict[str, Any]]) -> None:
    """User prompts, answers and tool calls with their results (the system prompt and
    reasoning are not drawn)."""
    results = {
        m.get("tool_call_id"): str(m.get("content") or "")
        for m in messages
        if m.get("role") == "tool"
    }
    for message in messages:
        role = message.get("role")
        if role == "user":
            # An image shows as ``[image: PNG 1280x800]`` after the text.
            await conversation.add_user(content_text(message.get("content")))
        elif role == "assistant":
            # A small-model step shows as what it stands for: its answer, or its card.
            text = shown_text(str(message.get("content") or ""))
            if text.strip():
                answer = await conversation.answer()
                answer.append_text(text)
                await conversation.end_segment()
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                card = await conversation.add_tool_card(
                    str(call.get("id")),
                    str(function.get("name")),
                    _arguments(function.get("arguments")),
                )
                result = results.get(call.get("id"))
                if result is not None:
                    card.set_result(result, ok=not result.startswith(_FAILED))
                    if result.startswith(("the user declined", "refused:")):
                        card.state = "denied"
    await conversation.end_segment()


_FAILED = ("error:", "refused:", "the user declined", "not run:", "stopped:")
"""How the agent's own results for calls that did not run begin."""


def _arguments(raw: object) -> dict[str, Any] | str:
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError:
            return raw
        return value if isinstance(value, dict) else raw
    return raw if isinstance(raw, dict) else str(raw)
