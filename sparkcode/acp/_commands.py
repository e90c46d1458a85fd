"""What an editor offers around the prompt: session modes and slash commands.

The modes are sparkcode's permission modes (``config.toml`` ``permission_mode``,
the TUI's ``/approve``), so switching one in the editor is the same switch.
The slash commands are the TUI's that make sense without its screen; an
editor lists them from ``available_commands_update`` and sends one as a prompt
(``/undo``), which :func:`parse_command` recognises before the model sees it.
"""

from __future__ import annotations

from dataclasses import dataclass

from acp.schema import (
    AvailableCommand,
    AvailableCommandInput,
    SessionMode,
    SessionModeState,
    UnstructuredCommandInput,
)

from sparkcode.agent.tools import JobError, JobTable
from sparkcode.config import PERMISSION_MODES, PermissionMode

MODE_HELP: dict[PermissionMode, str] = {
    "sandbox": "shell commands run without asking inside the bubblewrap sandbox; edits run; "
               "commits and MCP tools ask",
    "ask": "every edit, commit, MCP tool and non-read-only shell command asks",
    "auto-edit": "edits run; shell commands, commits and MCP tools ask",
    "full-auto": "everything runs without asking, shell commands outside any sandbox",
    "plan": "only read-only tools run; the model answers with a plan and a todo list",
}
EFFORTS: tuple[str, ...] = ("low", "high", "max")


@dataclass(frozen=True)
class AcpCommand:
    """One slash command an editor may send."""

    name: str
    help: str
    hint: str | None = None
    """What the argument is (None: it takes none)."""
    idle_only: bool = True
    """Refused while a turn runs (it changes the conversation)."""


COMMANDS: tuple[AcpCommand, ...] = (
    AcpCommand("clear", "start a new conversation"),
    AcpCommand("undo", "take the last turn back: its messages and its file changes"),
    AcpCommand("redo", "bring back the turn /undo took back (messages and files)"),
    AcpCommand("compact", "summarise the conversation now to free context (FOCUS: what the "
               "summary must keep)", hint="FOCUS (optional)"),
    AcpCommand("context", "show what fills the context window, part by part"),
    AcpCommand("effort", "set the reasoning effort", hint="|".join(EFFORTS)),
    AcpCommand("act", "approve the plan: leave plan mode and let the model carry it out"),
    AcpCommand("jobs", "list the background jobs the model started (state, pid, command); "
               "stop N ends job N and its processes", hint="stop N (optional)",
               idle_only=False),
)
BY_NAME = {c.name: c for c in COMMANDS}


def mode_state(current: PermissionMode) -> SessionModeState:
    """The modes as ``session/new`` returns them."""
    return SessionModeState(current_mode_id=current, available_modes=[
        SessionMode(id=mode, name=mode, description=MODE_HELP[mode])
        for mode in PERMISSION_MODES])


def available_commands() -> list[AvailableCommand]:
    return [AvailableCommand(name=c.name, description=c.help, input=AvailableCommandInput(
        root=UnstructuredCommandInput(hint=c.hint)) if c.hint else None) for c in COMMANDS]


def parse_command(text: str) -> tuple[AcpCommand, str] | None:
    """``(command, argument)`` when ``text`` is one of the commands, else None (a
    prompt that merely starts with a slash, like a path, goes to the model)."""
    if not text.startswith("/"):
        return None
    name, _, arg = text[1:].strip().partition(" ")
    command = BY_NAME.get(name)
    return (command, arg.strip()) if command is not None else None


async def jobs_command(table: JobTable, arg: str) -> str:
    """``/jobs``: the jobs as Markdown; ``/jobs stop N``: end job N, say its state
    (:class:`JobError` naming the problem: a bad argument, no such job)."""
    if not arg:
        return table.table()
    verb, _, number = arg.partition(" ")
    if verb != "stop" or not number.strip().isdigit():
        raise JobError("usage: /jobs [stop N]")
    job = table.get(int(number))
    await table.stop(job)
    return job.describe()


def as_mode(mode_id: str) -> PermissionMode | None:
    return next((m for m in PERMISSION_MODES if m == mode_id), None)


__all__ = ["BY_NAME", "COMMANDS", "EFFORTS", "AcpCommand", "as_mode", "available_commands",
           "jobs_command", "mode_state", "parse_command"]
