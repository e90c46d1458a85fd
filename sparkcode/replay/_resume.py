"""Rebuild a conversation from its recording, to resume or fork it.

Every request body holds the whole history the agent had when it sent it, as
the agent's own dicts serialised, so the history at the last request is that
body's ``messages`` exactly. What the last request did not carry is rebuilt
the way the agent built it: its recorded response is read back through the
agent's own :class:`~sparkcode.agent.wire.client.StreamParser` (content and tool calls)
and :func:`~sparkcode.agent.check_call`, tool results come from the
recorded ``ToolCallFinished`` events, and an undo or redo recorded after it is
applied. The first request of the resumed session therefore repeats the
recorded prefix byte for byte, and the engine's prefix cache hits. The requests
of a ``task`` call's sub-conversation (:attr:`Exchange.task`) are not the
conversation's: only the task's result, its ``ToolCallFinished``, is. The todo
list is the last recorded ``TodoUpdated`` of the session and its parents, as it
stood after the turn resumed from.

A last turn that did not finish (the recording stops mid-stream: a crash, a
kill) is left out, and :attr:`Rebuilt.notes` says so; so are older-format
recordings and skipped corrupt lines.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, cast

from engine.errors import UserError
from sparkcode.agent import RESULT_PREFIX, check_call, recover
from sparkcode.agent.core.context import SUMMARY_PREFIX
from sparkcode.agent.core.events import TodoItem
from sparkcode.agent.core.loop import stop_note
from sparkcode.agent.core.rewind import TurnMark
from sparkcode.agent.core.user_shell import CALL_ID_PREFIX as USER_SHELL_PREFIX
from sparkcode.agent.core.user_shell import context_text
from sparkcode.agent.tools import Tool, ToolRegistry, default_tools
from sparkcode.agent.wire.client import ChatError, StreamParser, ToolCall
from sparkcode.config import PERMISSION_MODES, PermissionMode
from sparkcode.sessions import FORMAT_VERSION, Exchange, Session, SessionStore, is_model_call

from ._play import recorded_reads, todo_items

Message = dict[str, Any]
MAX_PARENTS = 32
"""Longest chain of forks followed back to find a conversation."""


class ResumeError(UserError):
    """The recording holds no conversation that can be resumed (at that turn)."""


@dataclass
class Rebuilt:
    """A conversation rebuilt from a recording."""

    session_id: str
    workspace: str
    history: list[Message]
    """``[system, ...turns]``, as the agent held it."""
    turns: int
    """User turns in :attr:`history`."""
    marks: list[TurnMark] = field(default_factory=list)
    """Where each turn starts and its undo snapshot, for /undo after resuming."""
    notes: list[str] = field(default_factory=list)
    """What the user should know: a cut tail, an older format, skipped lines."""
    total_turns: int = 0
    """Turns the recording holds (more than :attr:`turns` when forked earlier)."""
    todos: tuple[TodoItem, ...] = ()
    """The todo list as the agent held it after :attr:`turns`."""
    mode: PermissionMode | None = None
    """The permission mode in use when the recording ends (its last ``ModeChanged``, or
    the header's ``permission_mode``); None when it did not record one."""
    reasoning_effort: str | None = None
    """The ``reasoning_effort`` the last request sent: what its prompt was rendered with.
    The resumed agent pins it (``Agent.effort_pinned``), so that with the ``glm``
    placement its first request repeats the recorded prefix."""
    pending_context: list[str] = field(default_factory=list)
    """What the user's ``!cmd`` printed after the last request, not sent yet: the
    resumed agent's next message carries it (``Agent.pending_context``), as the
    recorded session's would have."""

    @property
    def system_prompt(self) -> str:
        first = self.history[0] if self.history else {}
        content = first.get("content") if first.get("role") == "system" else None
        return content if isinstance(content, str) else ""


def user_turns(history: list[Message]) -> list[int]:
    """History indices of the user messages that start a turn: not a summary, and not a
    tool result sent as a user message (small-model mode's ``results_as_user``, which
    is how such a conversation is recorded, so resumed). Counted as turns, a resumed
    cpu-coder session's /undo took back the last result ("turn 11 ... it changed no
    file") instead of the turn whose edit wrote the file."""
    return [
        i
        for i, m in enumerate(history)
        if m.get("role") == "user"
        and not str(m.get("content") or "").startswith((SUMMARY_PREFIX, RESULT_PREFIX))
    ]


def accepted_requests(session: Session) -> list[Exchange]:
    """The conversation's model requests the server accepted, with a JSON body holding
    messages (a ``task`` call's sub-conversation has its own history: left out)."""
    out = []
    for e in session.exchanges:
        body = e.body_json
        if (
            is_model_call(e)
            and e.task is None
            and body is not None
            and isinstance(body.get("messages"), list)
            and e.status is not None
            and e.status < 400
        ):
            out.append(e)
    return out


async def rebuild_conversation(
    session: Session, *, turn: int | None = None, store: SessionStore | None = None
) -> Rebuilt:
    """The conversation of ``session`` (after ``turn``, default the last one)."""
    rebuilt = await _rebuild_all(session, store, depth=0)
    rebuilt.total_turns = rebuilt.turns
    if turn is not None:
        starts = user_turns(rebuilt.history)
        if turn < 0 or turn > len(starts):
            raise ResumeError(
                f"session {session.id} has {len(starts)} turn"
                f"{'s' if len(starts) != 1 else ''}; there is no turn {turn} "
                f"(fork at 0..{len(starts)})"
            )
        if turn < len(starts):
            rebuilt.history = rebuilt.history[: starts[turn]]
        rebuilt.turns = turn
        rebuilt.marks = [m for m in rebuilt.marks if m.turn <= turn]
        rebuilt.todos = _todos(session, store, 0, turn=turn)
        if turn < rebuilt.total_turns:  # a fork before the end: the !cmd came later
            rebuilt.pending_context = []
    n = len(rebuilt.pending_context)
    note = (
        f"the output of {n} shell command{'s' if n != 1 else ''} you ran with ! was not "
        "sent yet; it goes with your next message"
    )
    if n and note not in rebuilt.notes:
        rebuilt.notes.append(note)
    return rebuilt


async def _rebuild_all(session: Session, store: SessionStore | None, depth: int) -> Rebuilt:
    notes: list[str] = []
    fmt = session.header.get("format")
    if isinstance(fmt, int) and fmt < FORMAT_VERSION:
        notes.append(
            f"session {session.id} was recorded in an older format ({fmt}; now "
            f"{FORMAT_VERSION}): its conversation was rebuilt from the request bodies"
        )
    if session.problems:
        notes.append(
            f"{len(session.problems)} corrupt line(s) of the recording were skipped "
            f"(first: {session.problems[0]})"
        )
    requests = accepted_requests(session)
    if not requests:
        parent = session.header.get("parent")
        if isinstance(parent, str) and store is not None and depth < MAX_PARENTS:
            # A fork that has not sent anything yet: its conversation is its parent's.
            parent_session = store.load(parent)
            parent_turn = session.header.get("parent_turn")
            base = await rebuild_conversation(
                parent_session,
                turn=parent_turn if isinstance(parent_turn, int) else None,
                store=store,
            )
            base.session_id, base.notes = session.id, [*notes, *base.notes]
            base.workspace = str(session.header.get("workspace") or base.workspace)
            return base
        raise ResumeError(
            f"session {session.id} has no model request to resume from (nothing was sent in it)"
        )
    last = requests[-1]
    body = json.loads(last.body)
    history: list[Message] = body["messages"]
    finished = _turn_finished_after(session, last)
    unfinished = finished is None and not last.complete
    if unfinished:
        # The recording ends inside the last turn: resume from the one before it.
        cut = user_turns(history)
        history = history[: cut[-1]] if cut else history
        why = last.error or "the stream was cut off"
        notes.append(
            f"the recording's last turn did not finish ({why}); resuming from the "
            "last complete turn"
        )
    else:
        history += await _tail(session, last, finished, body.get("tools"))
        history = _apply_rewinds(session, last, history)
    rebuilt = Rebuilt(
        session_id=session.id,
        workspace=str(session.header.get("workspace", "")),
        history=history,
        turns=len(user_turns(history)),
        notes=notes,
    )
    rebuilt.marks = _marks(session, store, history, depth)
    rebuilt.todos = _todos(session, store, depth, drop_last_turn=unfinished)
    rebuilt.mode = recorded_mode(session)
    effort = body.get("reasoning_effort")
    rebuilt.reasoning_effort = effort if isinstance(effort, str) else None
    rebuilt.pending_context = _unsent_shell_output(session, last)
    return rebuilt


def _unsent_shell_output(session: Session, last: Exchange) -> list[str]:
    """The ``!cmd`` outputs recorded after ``last`` (the session's last request): the
    context texts the agent held for the next message (``user_shell.py``). A command
    counts when its closing ``user_shell`` notice was recorded (a refused or declined
    one closes with ``user_shell_refused`` and added nothing)."""
    commands: dict[str, str] = {}
    results: dict[str, str] = {}
    finished: str | None = None
    pending: list[str] = []
    for event in session.events:
        if event.t_ns <= last.t_ns:
            continue
        call_id = str(event.data.get("call_id", ""))
        if event.type == "ToolCallStarted" and call_id.startswith(USER_SHELL_PREFIX):
            arguments = event.data.get("arguments")
            command = arguments.get("command") if isinstance(arguments, dict) else None
            commands[call_id] = str(command or "")
        elif event.type == "ToolCallFinished" and call_id in commands:
            results[call_id] = str(event.data.get("result", ""))
            finished = call_id
        elif event.type == "Notice" and event.data.get("code") == "user_shell" and finished:
            pending.append(context_text(commands[finished], results[finished]))
            finished = None
    return pending


def recorded_mode(session: Session) -> PermissionMode | None:
    """The permission mode the session was in when its recording ends."""
    modes = [e.data.get("mode") for e in session.events if e.type == "ModeChanged"]
    for mode in [*reversed(modes), session.header.get("permission_mode")]:
        if mode in PERMISSION_MODES:
            return cast(PermissionMode, mode)
    return None


def _offered_tools(offered: object) -> ToolRegistry:
    """The tools to check the last reply's calls against: the built-in ones, and those
    the recorded request offered beside them (``offered``, its ``tools``:
    ``definition``/``references``/``rename``, MCP, skills, ``web_fetch``...) as their
    recorded schemas, so that such a call's arguments are normalised as the agent
    normalised them (coerced, nulls dropped) and the resumed prefix stays byte-identical."""
    known = set(default_tools().names)
    tools: list[Tool] = []
    for spec in offered if isinstance(offered, list) else []:
        function = spec.get("function") if isinstance(spec, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(function, dict) or not isinstance(name, str) or name in known:
            continue
        known.add(name)
        schema = function.get("parameters")
        properties = schema.get("properties") if isinstance(schema, dict) else None
        required = schema.get("required") if isinstance(schema, dict) else None
        tools.append(
            Tool(
                name=name,
                description=str(function.get("description") or ""),
                parameters=properties if isinstance(properties, dict) else {},
                kind="read",
                required=tuple(r for r in required if isinstance(r, str))
                if isinstance(required, list)
                else (),
            )
        )
    return default_tools(extra=tools)


def _turn_finished_after(session: Session, exchange: Exchange) -> str | None:
    """The reason of the first TurnFinished recorded after ``exchange``, if any."""
    for event in session.events:
        if event.t_ns > exchange.t_ns and event.type == "TurnFinished":
            return str(event.data.get("reason", "stop"))
    return None


async def _tail(
    session: Session, last: Exchange, finished: str | None, offered: object
) -> list[Message]:
    """What the agent appended after the last request: its answer and tool results.

    The calls are the ones read back from the stream; when the stream had none
    but the agent ran calls (it salvaged them from the text), the recorded
    ``ToolCallStarted`` events give them, and their text is cut from the answer
    as the agent cut it.
    """
    content, calls, reasoning = await _read_back(last)
    if finished in ("error", "cancelled"):
        # The agent keeps only the text of a failed or stopped stream.
        return [{"role": "assistant", "content": content}] if content else []
    registry = _offered_tools(offered)
    after = [e for e in session.events if e.t_ns > last.t_ns]
    started = [
        e
        for e in after
        if e.type == "ToolCallStarted"  # not the user's !cmd
        and not str(e.data.get("call_id")).startswith(USER_SHELL_PREFIX)
    ]
    if started and not calls:
        calls = [
            ToolCall(
                index=i,
                id=str(e.data.get("call_id")),
                name=str(e.data.get("name")),
                arguments=str(e.data.get("raw_arguments") or ""),
            )
            for i, e in enumerate(started)
        ]
        if any(
            e.type == "Notice" and str(e.data.get("code", "")).startswith("tool_call_")
            for e in after
        ):
            found = recover(content, reasoning, None, registry)
            if found is not None:
                content = found.content
    checked = [check_call(c, registry) for c in calls]
    message: Message = {"role": "assistant", "content": content}
    if checked:
        message["tool_calls"] = [c.history_entry() for c in checked]
    out = [message]
    results = {
        str(e.data.get("call_id")): str(e.data.get("result", ""))
        for e in after
        if e.type == "ToolCallFinished"
    }
    for call in checked:
        text = results.get(call.call_id)
        if text is None:
            text = (
                f"not run: {stop_note(finished)}"
                if finished
                else "not run: the turn was interrupted"
            )
        out.append({"role": "tool", "tool_call_id": call.call_id, "content": text})
    return out


async def _read_back(exchange: Exchange) -> tuple[str, list[ToolCall], str]:
    """The recorded response read by the agent's own stream parser."""
    parser = StreamParser(source="the recording")
    try:
        async for _ in parser.parse(recorded_reads(exchange, 0)):
            pass
    except ChatError:
        pass  # a cut stream: what arrived is in the result
    result = parser.result()
    return result.content, list(result.tool_calls), result.reasoning


def _apply_rewinds(session: Session, last: Exchange, history: list[Message]) -> list[Message]:
    """Undo and redo recorded after the last request (later requests carry their own)."""
    undone: list[list[Message]] = []
    for event in session.events:
        if event.t_ns <= last.t_ns:
            continue
        if event.type == "UndoApplied" and event.data.get("turn") is not None:
            count = int(event.data.get("messages_removed") or 0)
            if 0 < count < len(history):
                undone.append(history[-count:])
                history = history[:-count]
        elif event.type == "RedoApplied" and undone:
            history = [*history, *undone.pop()]
    return history


def _marks(
    session: Session, store: SessionStore | None, history: list[Message], depth: int
) -> list[TurnMark]:
    """Each turn's start in ``history`` and the snapshot taken before its first change."""
    snapshots: dict[int, str | None] = {}
    for s in _lineage(session, store, depth):
        for event in s.events:
            turn = event.data.get("turn")
            if not isinstance(turn, int):
                continue
            if event.type == "TurnStarted":
                snapshots[turn] = None
            elif event.type == "SnapshotTaken" and snapshots.get(turn) is None:
                snapshots[turn] = str(event.data.get("snapshot"))
            elif event.type == "UndoApplied":
                for t in [t for t in snapshots if t >= turn]:
                    del snapshots[t]
    return [
        TurnMark(turn=n, start=i, snapshot=snapshots.get(n))
        for n, i in enumerate(user_turns(history), start=1)
    ]


def _todos(
    session: Session,
    store: SessionStore | None,
    depth: int,
    *,
    turn: int | None = None,
    drop_last_turn: bool = False,
) -> tuple[TodoItem, ...]:
    """The todo list after ``turn`` (None: at the end of the recording), or before the
    last turn when that one is left out; a fork starts from its parent's list at its
    ``parent_turn``. The agent keeps the list across /undo, so an undo does not change it."""
    state: tuple[TodoItem, ...] = ()
    parent, parent_turn = session.header.get("parent"), session.header.get("parent_turn")
    parent_turn = parent_turn if isinstance(parent_turn, int) else None
    if isinstance(parent, str) and store is not None and depth < MAX_PARENTS:
        try:
            parent_session: Session | None = store.load(parent)
        except UserError:
            parent_session = None
        if parent_session is not None:
            upto = parent_turn if turn is None or parent_turn is None else min(turn, parent_turn)
            state = _todos(parent_session, store, depth + 1, turn=upto)
            if turn is not None and parent_turn is not None and turn <= parent_turn:
                return state
    before: dict[int, tuple[TodoItem, ...]] = {}
    last_start: int | None = None
    for event in session.events:
        number = event.data.get("turn")
        if event.type == "TurnStarted" and isinstance(number, int):
            before[number] = state  # a turn run again after /undo overwrites it
            last_start = number
        elif event.type == "TodoUpdated":
            state = tuple(todo_items(event.data.get("items")))
    if drop_last_turn and last_start is not None:
        return before[last_start]
    if turn is not None and turn + 1 in before:
        return before[turn + 1]
    return state


def _lineage(session: Session, store: SessionStore | None, depth: int) -> list[Session]:
    """The session's ancestors (oldest first) and the session itself."""
    chain = [session]
    current = session
    while store is not None and len(chain) < MAX_PARENTS - depth:
        parent = current.header.get("parent")
        if not isinstance(parent, str):
            break
        try:
            current = store.load(parent)
        except UserError:
            break
        chain.append(current)
    return chain[::-1]
