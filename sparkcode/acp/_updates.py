"""sparkcode's agent events as ACP ``session/update`` payloads (pure mapping).

One :class:`UpdateMapper` per ACP session turns each
:class:`~sparkcode.agent.core.events.Event` into zero or more updates: thinking and
answer deltas into ``agent_thought_chunk`` / ``agent_message_chunk``, a tool
call into ``tool_call`` then ``tool_call_update`` (a file edit carries ``diff``
content with the file's text before and after, so an editor shows its native
diff), the todo list into ``plan``, the last usage of a request into
``usage_update`` (tok/s, TTFT and acceptance in ``_meta``). A recorded
conversation (``session/load``) is replayed through :func:`history_updates`.

Nothing here talks to the client; :mod:`._session` sends what comes out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acp import (
    plan_entry,
    start_tool_call,
    text_block,
    tool_content,
    tool_diff_content,
    update_agent_message_text,
    update_agent_thought_text,
    update_plan,
    update_tool_call,
    update_user_message_text,
)
from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    ContentToolCallContent,
    FileEditToolCallContent,
    PlanEntryStatus,
    StopReason,
    ToolCallLocation,
    ToolCallProgress,
    ToolCallStart,
    ToolKind,
    UsageUpdate,
    UserMessageChunk,
)

from sparkcode.agent import (
    AgentError,
    BudgetExceeded,
    ContentDelta,
    ContextCompacted,
    DegenerationDetected,
    Event,
    FinishReason,
    MetricsUpdate,
    Notice,
    ReasoningDelta,
    TodoItem,
    TodoUpdated,
    ToolCallFinished,
    ToolCallStarted,
    ToolRegistry,
)
from sparkcode.agent import UsageUpdate as SparkUsage

Update = (
    AgentMessageChunk
    | AgentThoughtChunk
    | ToolCallStart
    | ToolCallProgress
    | AgentPlanUpdate
    | UsageUpdate
    | UserMessageChunk
)
ToolContent = ContentToolCallContent | FileEditToolCallContent

_KINDS: dict[str, ToolKind] = {
    "read": "read",
    "edit": "edit",
    "shell": "execute",
    "git": "other",
    "state": "think",
    "mcp": "other",
}
_SEARCH_TOOLS = frozenset({"grep", "glob"})
_TODO_STATUS: dict[str, PlanEntryStatus] = {
    "pending": "pending",
    "in_progress": "in_progress",
    "done": "completed",
}
STOP_REASONS: dict[FinishReason, StopReason] = {
    "stop": "end_turn",
    "max_turns": "max_turn_requests",
    "length": "max_tokens",
    "cancelled": "cancelled",
    "denied": "end_turn",
    "loop": "end_turn",
    "degenerate": "refusal",
    "error": "end_turn",
}
"""ACP has no stop reason for a refused approval, a loop or a degenerate stream;
the sparkcode reason goes along in the response's ``_meta``."""


def tool_kind(name: str, tools: ToolRegistry) -> ToolKind:
    """The ACP kind (an editor's icon) of one of sparkcode's tools."""
    if name in _SEARCH_TOOLS:
        return "search"
    tool = tools.get(name)
    return _KINDS.get(tool.kind, "other") if tool is not None else "other"


def tool_title(name: str, args: dict[str, Any]) -> str:
    """One line naming what the call does: ``bash: ls -la``, ``edit_file notes.md``."""
    if name == "bash":
        how = "bash (background)" if args.get("background") is True else "bash"
        return f"{how}: {str(args.get('command', ''))[:120]}"
    if name in ("job_output", "job_stop"):
        return f"{name}: job {args.get('job_id', '?')}"
    if name == "ask_user":  # the model's question to the user
        return f"ask_user: {str(args.get('question', ''))[:120]}"
    if name == "task":  # the explore subagent: what it was asked
        return f"task: {str(args.get('description') or args.get('prompt') or '')[:120]}"
    subject = args.get("path") or args.get("pattern") or args.get("message")
    if subject:
        return f"{name} {str(subject)[:120]}"
    return name


def note_text(message: str) -> str:
    """A notice as the answer shows it (set apart from the model's words)."""
    return f"\n\n> sparkcode: {message}\n\n"


@dataclass
class UpdateMapper:
    """Maps one session's events to ACP updates, keeping what a later event needs
    (a file's text before its edit, the last usage for the acceptance figures)."""

    workspace: Path
    tools: ToolRegistry
    _before: dict[str, tuple[Path, str | None]] = field(default_factory=dict)
    _usage: UsageUpdate | None = None

    def updates(self, event: Event) -> list[Update]:
        """The ACP updates for ``event`` (empty: nothing to show)."""
        if isinstance(event, ReasoningDelta):
            return [update_agent_thought_text(event.text)] if event.text else []
        if isinstance(event, ContentDelta):
            return [update_agent_message_text(event.text)] if event.text else []
        if isinstance(event, ToolCallStarted):
            return [self._started(event)]
        if isinstance(event, ToolCallFinished):
            return [self._finished(event)]
        if isinstance(event, TodoUpdated):
            return [plan_update(event.items)]
        if isinstance(event, SparkUsage):
            return self._usage_update(event)
        if isinstance(event, MetricsUpdate):
            return self._acceptance(event)
        if isinstance(event, Notice):
            return [update_agent_message_text(note_text(event.message))]
        if isinstance(event, BudgetExceeded):
            return [
                update_agent_message_text(
                    note_text(
                        f"thinking passed its budget ({event.used} > {event.budget} tokens); "
                        "continuing without thinking"
                    )
                )
            ]
        if isinstance(event, DegenerationDetected):
            what = "stopped the stream" if event.stopped else "warning only"
            return [
                update_agent_message_text(
                    note_text(
                        f"degenerate {event.channel} after {event.chars} characters "
                        f"({event.pattern}: {event.detail}); {what}"
                    )
                )
            ]
        if isinstance(event, ContextCompacted):
            return [
                update_agent_message_text(
                    note_text(
                        f"compacted {event.messages_summarised} messages: {event.tokens_before:,} "
                        f"-> ~{event.tokens_after_estimate:,} tokens"
                    )
                )
            ]
        if isinstance(event, AgentError):
            return [update_agent_message_text(note_text(f"error: {event.message}"))]
        return []

    def _started(self, event: ToolCallStarted) -> ToolCallStart:
        kind = tool_kind(event.name, self.tools)
        locations = None
        path = event.arguments.get("path")
        if isinstance(path, str) and path:
            target = (self.workspace / path).resolve()
            locations = [ToolCallLocation(path=str(target))]
            if kind == "edit":
                self._before[event.call_id] = (target, _read(target))
        # rawInput and rawOutput are any JSON in ACP, but Toad 0.6.20 type-checks
        # them as objects and drops a whole update that carries a string (its
        # tool calls then stay "pending" with no result or diff; tried 2026-12-02),
        # so both are always objects.
        raw_input = event.arguments or {"raw_arguments": event.raw_arguments}
        return start_tool_call(
            event.call_id,
            tool_title(event.name, event.arguments),
            kind=kind,
            status="pending",
            locations=locations,
            raw_input=raw_input,
        )

    def _finished(self, event: ToolCallFinished) -> ToolCallProgress:
        content: list[ToolContent] = []
        before = self._before.pop(event.call_id, None)
        if before is not None and not event.error:
            # Read back rather than taken from event.diff, which a new file lacks.
            target, old = before
            new = _read(target)
            if new is not None and new != old:
                content.append(tool_diff_content(str(target), new, old))
        content.append(tool_content(text_block(event.result)))
        return update_tool_call(
            event.call_id,
            status="failed" if event.error else "completed",
            content=content,
            raw_output={"output": event.result},
        )

    def _usage_update(self, event: SparkUsage) -> list[Update]:
        if not event.final or event.context_limit is None:
            return []  # one update a request, not one a frame
        meta = {
            "decode_tok_s": event.decode_tok_s,
            "prefill_tok_s": event.prefill_tok_s,
            "ttft_s": event.ttft_s,
            "prompt_tokens": event.prompt_tokens,
            "completion_tokens": event.completion_tokens,
            "reasoning_tokens": event.reasoning_tokens,
            "cached_tokens": event.cached_tokens,
        }
        self._usage = UsageUpdate(
            session_update="usage_update",
            used=event.context_used,
            size=event.context_limit,
            field_meta={"sparkcode": meta},
        )
        return [self._usage]

    def _acceptance(self, event: MetricsUpdate) -> list[Update]:
        """The engine's figures arrive after the request's usage: sent again with them."""
        if self._usage is None or event.acceptance_length is None:
            return []
        meta = dict((self._usage.field_meta or {}).get("sparkcode", {}))
        meta.update(
            acceptance_length=event.acceptance_length,
            prefix_cache_hit_rate=event.prefix_cache_hit_rate,
        )
        self._usage = self._usage.model_copy(update={"field_meta": {"sparkcode": meta}})
        return [self._usage]


def plan_update(items: tuple[TodoItem, ...]) -> AgentPlanUpdate:
    """The todo list as an ACP plan (the whole list, as ACP wants it)."""
    return update_plan(
        plan_entry(item.text, status=_TODO_STATUS.get(item.status, "pending")) for item in items
    )


def history_updates(history: list[dict[str, Any]], tools: ToolRegistry) -> list[Update]:
    """A recorded conversation as the updates that show it again (``session/load``):
    user and assistant messages, each tool call with its result."""
    out: list[Update] = []
    for message in history[1:]:  # the system prompt is not shown
        role = message.get("role")
        text = message.get("content")
        text = text if isinstance(text, str) else ""
        if role == "user" and text:
            out.append(update_user_message_text(text))
        elif role == "assistant":
            if text:
                out.append(update_agent_message_text(text))
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                name = str(function.get("name", "?"))
                args = _arguments(function.get("arguments"))
                out.append(
                    start_tool_call(
                        str(call.get("id", "")),
                        tool_title(name, args),
                        kind=tool_kind(name, tools),
                        status="pending",
                        raw_input=args,
                    )
                )
        elif role == "tool":
            out.append(
                update_tool_call(
                    str(message.get("tool_call_id", "")),
                    status="completed",
                    content=[tool_content(text_block(text))],
                )
            )
    return out


def _arguments(raw: object) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(str(raw))
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _read(path: Path) -> str | None:
    """A file's text, or None when it does not exist (a new file) or is not text."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


__all__ = [
    "STOP_REASONS",
    "Update",
    "UpdateMapper",
    "history_updates",
    "plan_update",
    "tool_kind",
    "tool_title",
]
