"""Running a reply's validated tool calls: permission, approval, undo snapshot, result.

:func:`execute_call` runs one call; :class:`TurnCalls` runs each reply's calls
of one turn in order, asks when the calls go round in circles (``loop_guard``), stops
running calls after a user's denial or a cancel (the rest get a result saying
so), and reports a changed todo list.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from ..extensions.hooks import Hooks, blocked_reason
from ..scaffold.loop_guard import Call, LoopGuard
from ..scaffold.prompts import LOOP_NUDGE
from ..tools import Tool, ToolContext, ToolError, ToolOutput
from .calls import CheckedCall
from .events import (
    ApprovalDecision,
    ApprovalResolved,
    Event,
    FinishReason,
    Notice,
    SnapshotTaken,
    TaskEvent,
    TodoUpdated,
    ToolCallFinished,
    ToolCallStarted,
)
from .permissions import Permissions
from .undo import UndoError, UndoStore

log = logging.getLogger(__name__)

Ask = Callable[[CheckedCall, Any, str, str, list[ApprovalDecision]], AsyncIterator[Event]]
"""The agent's approval round trip: yields the request and resolution events and
puts the decision in the list."""


class Record(Protocol):
    """Puts a call's result in the conversation; ``unfinished``: an edit that left work
    (:attr:`ToolOutput.unfinished`)."""

    def __call__(self, call: CheckedCall, text: str, /, unfinished: bool = False) -> None: ...


def stop_note(reason: str) -> str:
    """Why a call was not run, for its result."""
    return {
        "denied": "an earlier call in this step was declined by the user",
        "loop": "the loop was stopped after repeated calls",
        "cancelled": "the turn was cancelled",
    }.get(reason, "the turn ended")


class TurnCalls:
    """The tool calls of one turn, reply after reply; :attr:`stop` says why the
    turn must end after a reply's calls (None: send the results back)."""

    def __init__(
        self,
        *,
        turn: int,
        permissions: Permissions,
        ctx: ToolContext,
        undo_store: UndoStore | None,
        ask: Ask,
        record: Record,
        snapshot_taken: Callable[[str], None],
        cancelled: Callable[[], bool],
        hooks: Hooks | None = None,
        loop_nudge: bool = False,
    ) -> None:
        self.turn = turn
        self.loop_nudge = loop_nudge
        """The turn's first loop gets a result telling the model so, not a question."""
        self.hooks = hooks
        self.permissions = permissions
        self.ctx = ctx
        self.undo_store = undo_store
        self.ask = ask
        self.record = record
        self.snapshot_taken = snapshot_taken
        self.cancelled = cancelled
        self.stop: FinishReason | None = None
        self._snapshot_done = False
        self.guard = LoopGuard()
        """Watches this turn's calls for repeats, cycles and retried failures."""

    async def run(self, calls: list[CheckedCall]) -> AsyncIterator[Event]:
        """Run one reply's calls in order; every call gets exactly one result."""
        for call in calls:
            if self.stop is not None:
                self.record(call, f"not run: {stop_note(self.stop)}")
                continue
            yield ToolCallStarted(
                call_id=call.call_id,
                name=call.name,
                arguments=call.args,
                raw_arguments=call.raw_arguments,
            )
            question = self.guard.check(
                Call(call.name, call.raw_arguments if call.error else call.history_arguments)
            )
            if question is not None and self.loop_nudge:
                self.loop_nudge = False  # once a turn; the next loop asks as usual
                self.guard.forgive()
                msg = f"not run: {LOOP_NUDGE}"
                self.record(call, msg)
                yield ToolCallFinished(call_id=call.call_id, name=call.name, result=msg, error=msg)
                continue
            if question is not None:
                box: list[ApprovalDecision] = []
                async for event in self.ask(call, "loop", question, call.history_arguments, box):
                    yield event
                if not box[0].approved:
                    self.stop = "loop"
                    msg = "stopped: the same call was repeated; the user was asked"
                    self.record(call, msg)
                    yield ToolCallFinished(
                        call_id=call.call_id, name=call.name, result=msg, error=msg
                    )
                    continue
                self.guard.forgive()
            todos_before = self.ctx.todos.items
            async for event in execute_call(
                call,
                permissions=self.permissions,
                ctx=self.ctx,
                undo_store=self.undo_store,
                turn=self.turn,
                snapshot_done=self._snapshot_done,
                ask=self.ask,
                record=self.record,
                hooks=self.hooks,
            ):
                if isinstance(event, SnapshotTaken):
                    self._snapshot_done = True
                    self.snapshot_taken(event.snapshot)
                if (
                    isinstance(event, ApprovalResolved)
                    and not event.approved
                    and event.by == "user"
                ):
                    self.stop = "denied"
                if isinstance(event, ToolCallFinished):
                    self.guard.failed(event.error is not None)
                yield event
            if self.ctx.todos.items != todos_before:
                yield TodoUpdated(items=self.ctx.todos.items)
            if self.cancelled():
                self.stop = "cancelled"


async def execute_call(
    call: CheckedCall,
    *,
    permissions: Permissions,
    ctx: ToolContext,
    undo_store: UndoStore | None,
    turn: int,
    snapshot_done: bool,
    ask: Ask,
    record: Record,
    hooks: Hooks | None = None,
) -> AsyncIterator[Event]:
    """Run the PreToolUse hooks, check permissions, ask if needed, snapshot before
    the turn's first change, run the tool, run the PostToolUse hooks; every path
    ends with exactly one recorded result."""
    started = time.monotonic()
    if call.error is not None or call.tool is None:
        problem = call.error or "invalid call"
        record(call, f"error: {problem}")
        yield ToolCallFinished(
            call_id=call.call_id, name=call.name, result=f"error: {problem}", error=problem
        )
        return
    tool = call.tool
    if hooks:
        # Before the approval, as Claude Code does: a blocked call is never asked about.
        runs = await hooks.run(
            "PreToolUse",
            {"tool_name": call.name, "tool_input": call.args},
            tool=call.name,
            call_id=call.call_id,
        )
        for ran in runs:
            yield ran
        reason = blocked_reason(runs)
        if reason is not None:
            msg = f"not run: a PreToolUse hook blocked it: {reason}"
            record(call, msg)
            yield ToolCallFinished(
                call_id=call.call_id,
                name=call.name,
                result=msg,
                error=msg,
                duration_s=time.monotonic() - started,
            )
            return
    decision = permissions.decide(tool, call.args, ctx.workspace)
    diff: str | None = None
    if decision.verdict == "deny":
        yield ApprovalResolved(
            call_id=call.call_id,
            tool=call.name,
            approved=False,
            by=decision.by,
            reason=decision.reason,
        )
        msg = (
            f"refused: {decision.reason}"
            if decision.by == "mode"
            else f"refused: {decision.reason}; do not retry this call, choose another way"
        )
        record(call, msg)
        yield ToolCallFinished(call_id=call.call_id, name=call.name, result=msg, error=msg)
        return
    if decision.verdict == "ask":
        try:
            preview = await tool.preview(call.args, ctx)
        except ToolError as exc:
            # The call cannot succeed (e.g. the edit does not match): say so, no prompt.
            record(call, f"error: {exc}")
            yield ToolCallFinished(
                call_id=call.call_id, name=call.name, result=f"error: {exc}", error=str(exc)
            )
            return
        box: list[ApprovalDecision] = []
        kind = {"edit": "edit", "shell": "shell", "git": "git"}.get(tool.kind, "other")
        async for event in ask(call, kind, preview.summary, preview.detail, box):
            yield event
        if not box[0].approved:
            why = f" The user said: {box[0].reason}" if box[0].reason else ""
            msg = (
                f"refused: {box[0].reason or 'not allowed'}"
                if box[0].by == "rule"
                else f"the user declined this {call.name} call.{why}"
            )
            record(call, msg)
            yield ToolCallFinished(call_id=call.call_id, name=call.name, result=msg, error=msg)
            return
    else:
        yield ApprovalResolved(
            call_id=call.call_id,
            tool=call.name,
            approved=True,
            by=decision.by,
            reason=decision.reason,
        )
    if not tool.is_read_only(call.args, ctx.workspace) and not snapshot_done and undo_store:
        try:
            snap = await asyncio.to_thread(undo_store.snapshot, f"before turn {turn}")
            yield SnapshotTaken(snapshot=snap, turn=turn)
        except UndoError as exc:
            yield Notice(
                message=f"could not snapshot the workspace for undo: {exc}", code="snapshot_failed"
            )
    run_ctx = dataclasses.replace(
        ctx, sandbox=permissions.sandbox if decision.sandboxed else None, call_id=call.call_id
    )
    outcome: list[tuple[ToolOutput | None, str | None]] = []
    async for event in _run(tool, call, run_ctx, outcome):
        yield event
    output, error = outcome[0]
    if output is not None and output.sandbox_denied is not None:
        # The sandbox stopped it: the user may let it run outside, once.
        again: list[ApprovalDecision] = []
        async for event in ask(
            call,
            "shell",
            f"run outside the sandbox: {preview_line(call)}",
            f"{call.args.get('command', '')}\n\nInside the sandbox it "
            f"failed with '{output.sandbox_denied}'. Run it again without "
            "the sandbox (full access to your files and the network)?",
            again,
        ):
            yield event
        if again[0].approved:
            outcome.clear()
            async for event in _run(
                tool, call, dataclasses.replace(run_ctx, sandbox=None), outcome
            ):
                yield event
            output, error = outcome[0]
        else:
            output = ToolOutput(
                f"{output.text}\n[the sandbox blocked this "
                f"('{output.sandbox_denied}'); the user declined running it "
                "outside the sandbox]"
            )
    text = output.text if output is not None else f"error: {error}"
    if output is not None:
        diff = output.diff
        if output.notice is not None:
            yield Notice(message=output.notice, code="diagnostics")
        if hooks:
            runs = await hooks.run(
                "PostToolUse",
                {"tool_name": call.name, "tool_input": call.args, "tool_response": text},
                tool=call.name,
                call_id=call.call_id,
            )
            for ran in runs:
                yield ran
            reason = blocked_reason(runs)
            if reason is not None:
                text += f"\n\n[a PostToolUse hook reported:]\n{reason}"
    record(call, text, output is not None and output.unfinished)
    yield ToolCallFinished(
        call_id=call.call_id,
        name=call.name,
        result=text,
        error=error,
        diff=diff,
        duration_s=time.monotonic() - started,
    )


async def _run(
    tool: Tool, call: CheckedCall, ctx: ToolContext, out: list[tuple[ToolOutput | None, str | None]]
) -> AsyncIterator[Event]:
    """Run the tool: its progress events come wrapped in :class:`TaskEvent` (only the
    ``task`` tool has any); ``out`` gets its output, or the error message that
    replaces it."""
    output: ToolOutput | None = None
    try:
        async for item in tool.stream(call.args, ctx):
            if isinstance(item, ToolOutput):
                output = item
            else:
                yield TaskEvent(call_id=call.call_id, event=item)
    except ToolError as exc:
        out.append((None, str(exc)))
        return
    except Exception as exc:  # noqa: BLE001 - a tool bug becomes a result, not a crash
        log.exception("tool %s crashed", call.name)
        out.append((None, f"{call.name} failed: {type(exc).__name__}: {exc}"))
        return
    if output is None:
        out.append((None, f"{call.name} ended without a result"))
    else:
        out.append((output, None))


def preview_line(call: CheckedCall) -> str:
    command = str(call.args.get("command", ""))
    return command.splitlines()[0][:100] if command else call.name
