"""The command palette's slash commands, built from :data:`.commands.COMMANDS`.

An operation declared with a ``palette`` title (``sparkcode.operations``:
``Operation("undo", ..., palette="Undo last turn")``) is listed under that title, one
entry per allowed argument when it has choices (``Approval mode: full-auto``); the
workspace's custom commands are listed as ``/name``. Choosing one runs the same line
the prompt would (``/approve full-auto``), so the palette and the prompt cannot drift
apart. The app adds its own actions (start and stop the engine, stop the turn, fold
thinking) beside these.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol

from textual.app import SystemCommand

from .commands import COMMANDS, SlashCommand


class CommandRunner(Protocol):
    """Runs a slash-command line as the prompt would (the main screen does)."""

    def run_command(self, line: str) -> None: ...


def _runs(runner: CommandRunner, line: str) -> Callable[[], None]:
    return lambda: runner.run_command(line)


def _help(command: SlashCommand) -> str:
    return command.help[:1].upper() + command.help[1:]


def slash_commands(runner: CommandRunner) -> Iterator[SystemCommand]:
    """The palette's entries for the slash commands, in declaration order."""
    for command in COMMANDS.values():
        if command.custom:
            yield SystemCommand(f"/{command.name}", command.help, _runs(runner, f"/{command.name}"))
        elif command.palette and command.choices:
            for choice in command.choices:
                line = f"/{command.name} {choice}"
                yield SystemCommand(f"{command.palette}: {choice}", line, _runs(runner, line))
        elif command.palette:
            yield SystemCommand(command.palette, _help(command), _runs(runner, f"/{command.name}"))
