"""Context accounting and compaction.

The history is ``[system, *turns]``. The system prompt and the tool list never
change within a session, so the start of every request is byte-identical and
the engine's prefix cache keeps hitting. When the tokens in use approach the
limit, everything between the system prompt and the current turn is replaced
by one summary exchange; the system prompt stays untouched.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .images import content_text, image_tokens, image_urls

Message = dict[str, Any]
SUMMARY_PREFIX = "[Summary of the earlier conversation, written to save context]\n"
SUMMARY_INSTRUCTION = (
    "Summarise the conversation above for your own later use: the user's goals, decisions "
    "made, files read or changed and why, commands run and their outcome, and what is "
    "still open. Be concise and factual; plain text."
)


def estimate_tokens(messages: list[Message]) -> int:
    """A rough count (4 characters per token) for messages not yet sent.

    An image part counts as :func:`~.images.image_tokens` (one token per 28x28
    pixels), never its base64 text: a 1 MiB screenshot would otherwise count
    350,000 tokens and compact the conversation at once."""
    chars = images = 0
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            urls = image_urls(content)
            images += sum(image_tokens(url) for url in urls)
            m = {**m, "content": content_text(content)}
        chars += len(json.dumps(m, ensure_ascii=False))
    return chars // 4 + images + 1


@dataclass
class ContextMeter:
    """Tokens in use: exact after each response (the server's usage), estimated
    for messages appended since."""

    limit: int | None
    used: int = 0
    """prompt + completion tokens of the last response."""
    counted_messages: int = 0
    """How many history messages ``used`` covers."""

    def record(self, prompt_tokens: int, completion_tokens: int, messages: int) -> None:
        self.used = prompt_tokens + completion_tokens
        self.counted_messages = messages

    def estimate(self, history: list[Message]) -> int:
        if self.counted_messages > len(history):  # history was compacted or cleared
            return estimate_tokens(history)
        return self.used + estimate_tokens(history[self.counted_messages :])


def repair_history(history: list[Message]) -> None:
    """Give every tool call in ``history`` a result, in place (an interrupted turn may
    leave some without), so the next request is valid."""
    answered = {m.get("tool_call_id") for m in history if m.get("role") == "tool"}
    i = 0
    while i < len(history):
        msg = history[i]
        i += 1
        for call in msg.get("tool_calls") or []:
            if call["id"] not in answered:
                history.insert(
                    i,
                    {
                        "role": "tool",
                        "tool_call_id": call["id"],
                        "content": "not run: the turn was interrupted",
                    },
                )
                answered.add(call["id"])
                i += 1


def last_user_index(history: list[Message]) -> int:
    for i in range(len(history) - 1, -1, -1):
        if history[i].get("role") == "user":
            return i
    return len(history)


def transcript(messages: list[Message], limit_chars: int) -> str:
    """Older messages as plain text for the summariser (tool output trimmed)."""
    parts: list[str] = []
    for m in messages:
        role = m.get("role", "?")
        text = content_text(m.get("content"))
        if role == "tool":
            text = text if len(text) <= 600 else text[:400] + " [...] " + text[-150:]
        for call in m.get("tool_calls") or []:
            fn = call.get("function", {})
            text += f"\n-> {fn.get('name')}({fn.get('arguments', '')[:300]})"
        parts.append(f"{role}: {text}")
    joined = "\n\n".join(parts)
    return joined if len(joined) <= limit_chars else "[...]\n" + joined[-limit_chars:]


def mechanical_summary(messages: list[Message]) -> str:
    """A summary without the model: user requests, tool calls, last answers."""
    lines: list[str] = []
    for m in messages:
        if m.get("role") == "user":
            lines.append(f"- user asked: {content_text(m.get('content'))[:300]}")
        for call in m.get("tool_calls") or []:
            fn = call.get("function", {})
            lines.append(f"  - called {fn.get('name')}({fn.get('arguments', '')[:160]})")
        if m.get("role") == "assistant" and m.get("content"):
            lines.append(f"  - answered: {str(m['content'])[:300]}")
    return "\n".join(lines[-200:])


Summariser = Callable[[list[Message]], Awaitable[str]]


async def compact(
    history: list[Message],
    summarise: Summariser | None,
    limit_chars: int,
    *,
    keep_turn: bool = True,
    focus: str = "",
    footer: str = "",
) -> tuple[list[Message], int]:
    """A compacted copy of ``history`` and how many messages were summarised.

    ``history[0]`` (the system prompt) is kept as is; the current turn (from the
    last user message on) is kept unless ``keep_turn`` is False (``/compact``
    between turns); everything between becomes a summary. ``focus`` tells the
    summariser what to keep above all; ``footer`` (the open todo list) is
    appended to the summary as it is, so no summariser can drop it.
    """
    start = 1 if history and history[0].get("role") == "system" else 0
    cut = last_user_index(history) if keep_turn else len(history)
    older = history[start:cut]
    if not older:
        return history, 0
    text = ""
    if summarise is not None:
        try:
            text = (
                await summarise(
                    [
                        *history[:start],
                        {
                            "role": "user",
                            "content": transcript(older, limit_chars)
                            + "\n\n"
                            + SUMMARY_INSTRUCTION
                            + (f" Above all, keep: {focus}" if focus else ""),
                        },
                    ]
                )
            ).strip()
        except Exception:  # noqa: BLE001 - any failure falls back to a mechanical summary
            text = ""
    if not text:
        text = mechanical_summary(older)
    if footer:
        text += "\n\n" + footer
    summary = [
        {"role": "user", "content": SUMMARY_PREFIX + text},
        {"role": "assistant", "content": "Understood; I will continue from that summary."},
    ]
    return [*history[:start], *summary, *history[cut:]], len(older)
