"""Renders the agent's events into the conversation, status bar and approvals."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sparkcode.agent.core import events as ev
from sparkcode.hooks.session import describe

from .stats import StatsTracker
from .widgets.approval import ApprovalStack
from .widgets.chat import DegenerationWarning
from .widgets.conversation import Conversation
from .widgets.status_bar import StatusBar
from .widgets.todo_panel import TodoPanel

_REASONS = {
    "max_turns": "the turn reached its request limit",
    "loop": "the model kept repeating the same tool call, so the turn stopped",
    "denied": "the turn stopped after a denied tool call",
    "cancelled": "the turn was stopped",
    "length": "the answer hit the output token limit",
    "blocked": "a UserPromptSubmit hook blocked the prompt; nothing was sent",
    "degenerate": "the stream degenerated (looping or garbled text), so it was stopped "
    "(/degenerate warn only warns)",
}


_OUTPUT = (ev.ReasoningDelta, ev.ContentDelta, ev.ToolCallStarted, ev.AgentError)
"""Events that end the wait for a request's first token."""


class TurnRenderer:
    """Turns one stream of :mod:`sparkcode.agent.core.events` into widget updates.

    It watches nothing itself: a degenerate stream is the agent's verdict
    (:class:`~sparkcode.agent.core.watch.StreamWatch`, governed by ``/degenerate``),
    drawn when its :class:`~sparkcode.agent.core.events.DegenerationDetected` arrives.
    """

    def __init__(
        self,
        conversation: Conversation,
        status_bar: StatusBar,
        approvals: ApprovalStack,
        stats: StatsTracker,
        *,
        todos: TodoPanel | None = None,
        attention: Callable[[str], object] | None = None,
    ) -> None:
        self.conversation = conversation
        self.attention = attention
        """Called when the user is needed: a turn ended, an approval waits."""
        self.todos = todos
        self.status_bar = status_bar
        self.approvals = approvals
        self.stats = stats
        self.last_content = ""
        """The final answer of the last finished turn."""

    async def handle(self, event: ev.Event) -> None:
        """Apply one event; unknown event types are ignored."""
        conv = self.conversation
        if self.stats.current.waiting_since is not None and isinstance(event, _OUTPUT):
            self.status_bar.stats = self.stats.output_started()
        match event:
            case ev.RequestStarted():
                self.status_bar.stats = self.stats.request_started()
            case ev.ReasoningDelta(text=text, tokens_so_far=tokens, budget=budget):
                block = await conv.thinking(budget)
                block.append_text(text, tokens)
            case ev.ContentDelta(text=text):
                answer = conv.current_answer or await conv.answer()
                answer.append_text(text)
            case ev.UsageUpdate():
                self.status_bar.stats = self.stats.usage(event)
                thinking = conv.current_thinking
                if thinking is not None and event.reasoning_tokens:
                    thinking.count_tokens(event.reasoning_tokens)
            case ev.MetricsUpdate():
                self.status_bar.stats = self.stats.metrics(event)
            case ev.BudgetExceeded(used=used, budget=budget):
                thinking = conv.current_thinking
                if thinking is not None:
                    thinking.note = "over budget: cut"
                    await thinking.finish()
                await conv.add_notice(
                    f"thinking passed its budget ({used} of {budget} tokens) and the server "
                    "did not stop it: the stream was cut and the answer continues without "
                    "thinking"
                )
            case ev.DegenerationDetected(pattern=pattern, detail=detail):
                note = "stopped" if event.stopped else "still streaming"
                await conv.mount(
                    DegenerationWarning(
                        pattern, f"{detail} ({event.channel}, {note})", stopped=event.stopped
                    )
                )
            case ev.Notice(message=message):
                await conv.add_notice(message)
            case ev.ToolCallStarted(call_id=call_id, name=name):
                args: dict[str, Any] | str = event.arguments or event.raw_arguments
                await conv.add_tool_card(call_id, name, args)
            case ev.TaskEvent(call_id=call_id, event=inner):
                card = conv.tool_card(call_id)
                if card is not None:
                    await card.task_event(inner)
            case ev.HookRan():
                card = conv.tool_card(event.call_id) if event.call_id else None
                if card is not None:
                    card.add_hook(describe(event), ok=not event.failed)
                else:
                    await conv.add_notice(describe(event))
            case ev.ApprovalRequested():
                await self._ask(event)
            case ev.ApprovalResolved(call_id=call_id, approved=approved):
                card = conv.tool_card(call_id)
                if card is not None:
                    card.state = "running" if approved else "denied"
            case ev.ToolCallFinished():
                card = conv.tool_card(event.call_id)
                if card is not None:
                    if event.diff:
                        card.set_diff(event.diff)
                    denied = card.state == "denied"
                    card.set_result(event.result, ok=event.error is None)
                    if denied:
                        card.state = "denied"
            case ev.TodoUpdated(items=items):
                if self.todos is not None:
                    self.todos.items = items
            case ev.ContextCompacted():
                await conv.add_notice(
                    f"context compacted: {event.messages_summarised} older messages "
                    f"summarised ({event.tokens_before} -> ~{event.tokens_after_estimate} "
                    "tokens)"
                )
            case ev.SteerDelivered(text=text):
                await conv.add_user(text)
            case ev.UndoApplied(changed=changed):
                await conv.add_notice(_undo_text(changed))
            case ev.AgentError(message=message):
                await conv.add_error(message)
            case ev.TurnFinished(reason=reason, content=content):
                await conv.end_segment()
                self.status_bar.stats = self.stats.turn_finished()
                self.last_content = content
                if reason in _REASONS:
                    await conv.add_notice(_REASONS[reason])
                if self.attention is not None:
                    self.attention(_REASONS.get(reason, "the answer is ready"))
            case _:
                pass

    async def _ask(self, request: ev.ApprovalRequested) -> None:
        card = self.conversation.tool_card(request.call_id)
        if card is not None:
            card.state = "waiting"
        await self.approvals.add(request)
        if self.attention is not None:
            self.attention(f"approval waits: {request.summary}")


def _undo_text(changed: tuple[str, ...]) -> str:
    if not changed:
        return "undo: the workspace already matched the snapshot"
    shown = ", ".join(changed[:8]) + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")
    return f"undo: restored {shown}"
