"""Running one validated tool call: permission, approval, undo snapshot, result."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from ._calls import CheckedCall
from .events import (
    ApprovalDecision,
    ApprovalResolved,
    Event,
    Notice,
    SnapshotTaken,
    ToolCallFinished,
)
from .permissions import Permissions
from .tools import ToolContext, ToolError
from .undo import UndoError, UndoStore

log = logging.getLogger(__name__)

Ask = Callable[[CheckedCall, Any, str, str, list[ApprovalDecision]], AsyncIterator[Event]]
"""The agent's approval round trip: yields the request and resolution events and
puts the decision in the list."""
Record = Callable[[CheckedCall, str], None]
"""Appends a tool result to the history."""


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
) -> AsyncIterator[Event]:
    """Check permissions, ask if needed, snapshot before the turn's first change,
    run the tool; every path ends with exactly one recorded result."""
    started = time.monotonic()
    if call.error is not None or call.tool is None:
        problem = call.error or "invalid call"
        record(call, f"error: {problem}")
        yield ToolCallFinished(call_id=call.call_id, name=call.name,
                               result=f"error: {problem}", error=problem)
        return
    tool = call.tool
    decision = permissions.decide(tool, call.args)
    diff: str | None = None
    if decision.verdict == "deny":
        yield ApprovalResolved(call_id=call.call_id, tool=call.name, approved=False,
                               by="rule", reason=decision.reason)
        msg = f"refused: {decision.reason}; do not retry this call, choose another way"
        record(call, msg)
        yield ToolCallFinished(call_id=call.call_id, name=call.name, result=msg, error=msg)
        return
    if decision.verdict == "ask":
        try:
            preview = await tool.preview(call.args, ctx)
        except ToolError as exc:
            # The call cannot succeed (e.g. the edit does not match): say so, no prompt.
            record(call, f"error: {exc}")
            yield ToolCallFinished(call_id=call.call_id, name=call.name,
                                   result=f"error: {exc}", error=str(exc))
            return
        box: list[ApprovalDecision] = []
        kind = {"edit": "edit", "shell": "shell", "git": "git"}.get(tool.kind, "other")
        async for event in ask(call, kind, preview.summary, preview.detail, box):
            yield event
        if not box[0].approved:
            why = f" The user said: {box[0].reason}" if box[0].reason else ""
            msg = f"the user declined this {call.name} call.{why}"
            record(call, msg)
            yield ToolCallFinished(call_id=call.call_id, name=call.name, result=msg,
                                   error=msg)
            return
    else:
        yield ApprovalResolved(call_id=call.call_id, tool=call.name, approved=True,
                               by=decision.by, reason=decision.reason)
    if not tool.is_read_only(call.args) and not snapshot_done and undo_store:
        try:
            snap = await asyncio.to_thread(undo_store.snapshot, f"before turn {turn}")
            yield SnapshotTaken(snapshot=snap, turn=turn)
        except UndoError as exc:
            yield Notice(message=f"could not snapshot the workspace for undo: {exc}",
                         code="snapshot_failed")
    error: str | None = None
    try:
        output = await tool.run(call.args, ctx)
        text, diff = output.text, output.diff
    except ToolError as exc:
        text, error = f"error: {exc}", str(exc)
    except Exception as exc:  # noqa: BLE001 - a tool bug becomes a result, not a crash
        log.exception("tool %s crashed", call.name)
        text, error = f"error: {call.name} failed: {type(exc).__name__}: {exc}", str(exc)
    record(call, text)
    yield ToolCallFinished(call_id=call.call_id, name=call.name, result=text, error=error,
                           diff=diff, duration_s=time.monotonic() - started)
