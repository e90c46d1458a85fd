"""The slash commands: their names, arguments and help, and how a line is parsed."""

from __future__ import annotations

from dataclasses import dataclass

APPROVAL_MODES: tuple[str, ...] = ("ask", "auto-edit", "full-auto")
EFFORTS: tuple[str, ...] = ("low", "high", "max")


@dataclass(frozen=True)
class SlashCommand:
    """One command the prompt understands."""

    name: str
    usage: str
    help: str
    choices: tuple[str, ...] = ()
    """Allowed arguments (empty: free-form or none)."""


COMMANDS: dict[str, SlashCommand] = {c.name: c for c in (
    SlashCommand("help", "/help", "show the commands and key bindings"),
    SlashCommand("clear", "/clear", "start a new conversation"),
    SlashCommand("effort", "/effort low|high|max", "set the reasoning effort", EFFORTS),
    SlashCommand("budget", "/budget N", "set the thinking token budget (0: no thinking)"),
    SlashCommand("model", "/model [NAME]", "show or set the model requests ask for"),
    SlashCommand("approve", "/approve ask|auto-edit|full-auto",
                 "set which tool calls need approval", APPROVAL_MODES),
    SlashCommand("undo", "/undo", "restore the workspace to before the last turn's changes"),
    SlashCommand("sessions", "/sessions", "browse recorded sessions"),
    SlashCommand("engine", "/engine", "show or hide the engine panel"),
)}


class CommandError(ValueError):
    """A slash command line that cannot be run; the message says why."""


@dataclass(frozen=True)
class ParsedCommand:
    """A validated command line."""

    name: str
    arg: str


def parse_command(line: str) -> ParsedCommand:
    """Split and validate ``/name [arg]``; raise :class:`CommandError` otherwise."""
    name, _, arg = line.strip().removeprefix("/").partition(" ")
    arg = arg.strip()
    command = COMMANDS.get(name)
    if command is None:
        known = " ".join(f"/{n}" for n in COMMANDS)
        raise CommandError(f"unknown command /{name}; known: {known}")
    if command.choices and arg not in command.choices:
        raise CommandError(f"usage: {command.usage}")
    if name == "budget":
        if not arg.isdigit():
            raise CommandError(f"usage: {command.usage} (a whole number of tokens)")
    return ParsedCommand(name, arg)


def help_markdown() -> str:
    """The /help text."""
    rows = "\n".join(f"| `{c.usage}` | {c.help} |" for c in COMMANDS.values())
    return (
        "| command | what it does |\n|---|---|\n" + rows
        + "\n\n`@path` mentions a workspace file (Tab completes). Up/Down walk the prompt "
        "history. F2 toggles the engine panel, ctrl+t the thinking blocks, ctrl+p opens "
        "the command palette, escape stops a running turn."
    )
