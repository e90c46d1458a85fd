"""What an editor offers around the prompt: session modes and slash commands.

The modes are sparkcode's permission modes (``config.toml`` ``permission_mode``,
the TUI's ``/approve``), so switching one in the editor is the same switch.
The slash commands are the operations of :mod:`sparkcode.operations` offered to
ACP (the same registry the TUI reads: name, help, argument and its values); an
editor lists them from ``available_commands_update`` and sends one as a prompt
(``/undo``), which :func:`parse_command` recognises before the model sees it.
"""

from __future__ import annotations

from acp.schema import (
    AvailableCommand,
    AvailableCommandInput,
    SessionMode,
    SessionModeState,
    UnstructuredCommandInput,
)

from sparkcode.config import PERMISSION_MODES, PermissionMode
from sparkcode.operations import Operation, offered

MODE_HELP: dict[PermissionMode, str] = {
    "sandbox": "shell commands run without asking inside the bubblewrap sandbox; edits run; "
    "commits and MCP tools ask",
    "ask": "every edit, commit, MCP tool and non-read-only shell command asks",
    "auto-edit": "edits run; shell commands, commits and MCP tools ask",
    "full-auto": "everything runs without asking, shell commands outside any sandbox",
    "plan": "only read-only tools run; the model answers with a plan and a todo list",
}


def _offered() -> dict[str, Operation]:
    return {op.name: op for op in offered("acp")}


def mode_state(current: PermissionMode) -> SessionModeState:
    """The modes as ``session/new`` returns them."""
    return SessionModeState(
        current_mode_id=current,
        available_modes=[
            SessionMode(id=mode, name=mode, description=MODE_HELP[mode])
            for mode in PERMISSION_MODES
        ],
    )


def available_commands() -> list[AvailableCommand]:
    """The registry's operations ACP offers, as ``available_commands_update`` lists them."""
    return [
        AvailableCommand(
            name=op.name,
            description=op.help,
            input=AvailableCommandInput(root=UnstructuredCommandInput(hint=op.arg.hint))
            if op.arg is not None
            else None,
        )
        for op in offered("acp")
    ]


def parse_command(text: str) -> tuple[Operation, str] | None:
    """``(operation, argument)`` when ``text`` is one of the commands, else None (a
    prompt that merely starts with a slash, like a path, goes to the model). The
    argument is checked when it runs, so a bad one is answered in the conversation."""
    if not text.startswith("/"):
        return None
    name, _, arg = text[1:].strip().partition(" ")
    op = _offered().get(name)
    return (op, arg.strip()) if op is not None else None


def as_mode(mode_id: str) -> PermissionMode | None:
    return next((m for m in PERMISSION_MODES if m == mode_id), None)


__all__ = ["as_mode", "available_commands", "mode_state", "parse_command"]
