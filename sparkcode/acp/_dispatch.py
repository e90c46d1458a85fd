"""ACP's side of the slash commands: the operations that are not written once.

An operation with a ``setting`` or a ``query`` (``/effort``, ``/context``, ``/jobs``...)
runs as :mod:`sparkcode.operations` wrote it, on :class:`~sparkcode.operations.
AgentOps`; the others have a handler here by name (``/act`` is the session's own,
since it starts a turn). A test holds :data:`HANDLERS` equal to what ACP offers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from engine.errors import UserError
from sparkcode.agent.core.events import Event
from sparkcode.agent.core.undo import UndoError
from sparkcode.agent.tools import JobError
from sparkcode.operations import AgentOps, Operation, OperationError
from sparkcode.operations.export import export_transcript
from sparkcode.replay import Rebuilt
from sparkcode.sessions import SessionStore
from sparkcode.start import AgentSession

Show = Callable[[Event], Awaitable[None]]
"""Sends one agent event to the editor as its updates."""


@dataclass(frozen=True)
class Context:
    """What an ACP handler works on."""

    session: AgentSession
    show: Show
    sessions: SessionStore


Handler = Callable[[Context, str], Awaitable[str]]


async def _clear(ctx: Context, arg: str) -> str:
    ctx.session.agent.clear()
    return "a new conversation (the workspace is unchanged)"


async def _undo(ctx: Context, arg: str) -> str:
    undone = await asyncio.to_thread(ctx.session.agent.undo)
    return (
        f"undo: turn {undone.turn or '-'} taken back ({undone.messages_removed} "
        f"messages); files: {', '.join(undone.changed) or 'none changed'}; /redo brings "
        "it back"
    )


async def _redo(ctx: Context, arg: str) -> str:
    redone = await asyncio.to_thread(ctx.session.agent.redo)
    return (
        f"redo: turn {redone.turn} is back ({redone.messages_restored} messages); "
        f"files: {', '.join(redone.changed) or 'none changed'}"
    )


async def _compact(ctx: Context, arg: str) -> str:
    async for event in ctx.session.agent.compact_now(arg):
        await ctx.show(event)
    return "compacted"


@dataclass(frozen=True)
class _Export:
    """The session as ``/export`` reads it (:class:`~sparkcode.operations.export.ExportScreen`)."""

    workspace: Path
    sessions: SessionStore
    agent: AgentSession
    resume: Rebuilt | None = None


async def _export(ctx: Context, arg: str) -> str:
    return await export_transcript(
        _Export(ctx.session.target.workspace, ctx.sessions, ctx.session), arg
    )


HANDLERS: dict[str, Handler] = {
    "clear": _clear,
    "undo": _undo,
    "redo": _redo,
    "compact": _compact,
    "export": _export,
}
SESSION_HANDLED = frozenset({"act"})
"""Operations :class:`~._session.AcpSession` runs itself."""


async def run_command(ctx: Context, op: Operation, arg: str) -> str:
    """The reply to ``/name arg``: what it did, or ``/name failed: why``."""
    try:
        op.check(arg)
        if op.setting is not None:
            setting = op.setting(arg)
            setting.apply(AgentOps(ctx.session.agent))
            return setting.said
        if op.query is not None:
            return (await op.query(AgentOps(ctx.session.agent), arg)).text
        handler = HANDLERS.get(op.name)
        if handler is None:
            raise OperationError("not available over ACP")
        return await handler(ctx, arg)
    except (UndoError, OperationError, JobError, UserError) as exc:
        return f"/{op.name} failed: {exc}"


__all__ = ["HANDLERS", "SESSION_HANDLED", "Context", "run_command"]
