"""The slash commands, each declared once together with its handler.

A command is a :class:`SlashCommand` registered with :func:`command` on an
``async def handler(screen, arg)``; parsing, completion, ``/help`` and the
main screen's dispatch all read :data:`COMMANDS`. To add one::

    @command("plan", "/plan on|off", "plan before editing", choices=("on", "off"))
    async def _plan(screen: MainScreen, arg: str) -> None:
        screen.with_agent(lambda agent: ...)
        await screen.say(f"plan mode: {arg}")

Handlers use the screen's public surface (``say``, ``with_agent``, ``agent``,
``conversation``...); a handler that raises :class:`CommandError` (or anything
else) is reported in the conversation as ``/name failed: ...``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .screens.main import MainScreen

APPROVAL_MODES: tuple[str, ...] = ("ask", "auto-edit", "full-auto")
EFFORTS: tuple[str, ...] = ("low", "high", "max")

Handler = Callable[["MainScreen", str], Awaitable[None]]


@dataclass(frozen=True)
class SlashCommand:
    """One command the prompt understands."""

    name: str
    usage: str
    help: str
    handler: Handler
    choices: tuple[str, ...] = ()
    """Allowed arguments (empty: free-form or none)."""
    integer: bool = False
    """The argument must be a whole number."""
    idle_only: bool = False
    """Refused while a turn runs (it changes the conversation)."""


COMMANDS: dict[str, SlashCommand] = {}
"""Every command by name, in declaration order (the order ``/help`` lists them)."""


def command(name: str, usage: str, help: str, *, choices: tuple[str, ...] = (),
            integer: bool = False, idle_only: bool = False) -> Callable[[Handler], Handler]:
    """Declare a slash command with the decorated coroutine as its handler."""

    def register(handler: Handler) -> Handler:
        if name in COMMANDS:
            raise ValueError(f"slash command /{name} is declared twice")
        COMMANDS[name] = SlashCommand(name, usage, help, handler, choices, integer, idle_only)
        return handler

    return register


class CommandError(ValueError):
    """A slash command line that cannot be run; the message says why."""


@dataclass(frozen=True)
class ParsedCommand:
    """A validated command line."""

    name: str
    arg: str

    @property
    def command(self) -> SlashCommand:
        return COMMANDS[self.name]


def parse_command(line: str) -> ParsedCommand:
    """Split and validate ``/name [arg]``; raise :class:`CommandError` otherwise."""
    name, _, arg = line.strip().removeprefix("/").partition(" ")
    arg = arg.strip()
    found = COMMANDS.get(name)
    if found is None:
        known = " ".join(f"/{n}" for n in COMMANDS)
        raise CommandError(f"unknown command /{name}; known: {known}")
    if found.choices and arg not in found.choices:
        raise CommandError(f"usage: {found.usage}")
    if found.integer and not arg.isdigit():
        raise CommandError(f"usage: {found.usage} (a whole number of tokens)")
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


# -- the commands ----------------------------------------------------------------


@command("help", "/help", "show the commands and key bindings")
async def _help(screen: MainScreen, arg: str) -> None:
    await screen.show_markdown(help_markdown())


@command("clear", "/clear", "start a new conversation", idle_only=True)
async def _clear(screen: MainScreen, arg: str) -> None:
    await screen.new_conversation()


@command("effort", "/effort low|high|max", "set the reasoning effort", choices=EFFORTS)
async def _effort(screen: MainScreen, arg: str) -> None:
    screen.with_agent(lambda agent: agent.set_reasoning_effort(arg))
    await screen.say(f"reasoning effort: {arg}")


@command("budget", "/budget N", "set the thinking token budget (0: no thinking)", integer=True)
async def _budget(screen: MainScreen, arg: str) -> None:
    screen.with_agent(lambda agent: agent.set_thinking_token_budget(int(arg)))
    await screen.say(f"thinking budget: {int(arg)} tokens")


@command("model", "/model [NAME]", "show or set the model requests ask for")
async def _model(screen: MainScreen, arg: str) -> None:
    if arg:
        screen.with_agent(lambda agent: agent.set_model(arg))
        screen.model_changed(arg)
        await screen.say(f"model: {arg}")
        return
    current = screen.agent.model if screen.agent else screen.engine_view.model
    await screen.say(f"model: {current or 'not known yet'}")


@command("approve", "/approve ask|auto-edit|full-auto", "set which tool calls need approval",
         choices=APPROVAL_MODES)
async def _approve(screen: MainScreen, arg: str) -> None:
    screen.with_agent(lambda agent: agent.set_approval_mode(arg))
    await screen.say(f"approval mode: {arg}")


@command("undo", "/undo", "restore the workspace to before the last turn's changes",
         idle_only=True)
async def _undo(screen: MainScreen, arg: str) -> None:
    if screen.agent is None:
        raise CommandError("nothing to undo yet")
    await screen.say(await screen.agent.undo())
    screen.workspace_changed()


@command("sessions", "/sessions", "browse recorded sessions")
async def _sessions(screen: MainScreen, arg: str) -> None:
    await screen.open_sessions()


@command("engine", "/engine", "show or hide the engine panel")
async def _engine(screen: MainScreen, arg: str) -> None:
    screen.action_toggle_engine()
