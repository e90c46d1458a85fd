"""The TUI's slash commands: the operations of :mod:`sparkcode.operations` offered
here, each with the handler that runs it on the screen.

What a command is (name, help, argument and its allowed values, idle-only, palette
title) is declared once in the registry, which ACP reads too; :data:`COMMANDS` is
built from it at each use (then the workspace's custom commands), and parsing,
completion, ``/help``, the command palette (``palette.py``) and the main screen's
dispatch all read it. An operation written once there (a ``setting`` or a ``query``)
needs nothing here; one that works on the screen has a handler::

    @handles("plan")
    async def _plan(screen: CommandScreen, arg: str) -> None:
        ...

Handlers see the screen only through :class:`CommandScreen` (``command_port.py``);
a handler that raises :class:`CommandError` (or anything else) is reported in the
conversation as ``/name failed: ...``.
"""

from __future__ import annotations

import asyncio
import difflib
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from sparkcode.agent.core.events import ApprovalDecision, ApprovalRequested
from sparkcode.agent.core.loop import ACT_PROMPT
from sparkcode.agent.extensions.agents_md import draft_agents_md
from sparkcode.agent.extensions.instructions import FILE_NAMES
from sparkcode.custom_commands import CustomCommand, CustomCommands
from sparkcode.hooks import project_hooks
from sparkcode.operations import REGISTRY, Operation, OperationError, offered

from .agent_port import AgentPort
from .command_port import CommandScreen
from .exporting import export_transcript

Handler = Callable[[CommandScreen, str], Awaitable[None]]


@dataclass(frozen=True)
class SlashCommand:
    """One command the prompt understands: an operation of the registry (or a custom
    command) with the handler that runs it here."""

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
    custom: bool = False
    """A Markdown file's command (:mod:`sparkcode.custom_commands`): sends its prompt."""
    palette: str = ""
    """Its title in the command palette (``palette.py``; empty: not listed)."""


HANDLERS: dict[str, Handler] = {}
"""The TUI's own handlers, by operation name (an operation written once needs none)."""


def handles(name: str) -> Callable[[Handler], Handler]:
    """Declare the decorated coroutine as the TUI's handler of operation ``name``."""

    def register(handler: Handler) -> Handler:
        if name in HANDLERS:
            raise ValueError(f"slash command /{name} has two TUI handlers")
        HANDLERS[name] = handler
        return handler

    return register


def _shared(op: Operation) -> Handler:
    """The handler of an operation written once in :mod:`sparkcode.operations`."""

    async def run(screen: CommandScreen, arg: str) -> None:
        if op.setting is not None:
            setting = op.setting(arg)
            screen.with_agent(setting.apply)
            await screen.say(setting.said)
            return
        if op.query is None:
            raise CommandError(f"/{op.name} has no handler in the TUI")
        if screen.agent is None:
            raise CommandError(op.no_agent or f"/{op.name}: the agent is not connected yet")
        reply = await op.query(screen.agent, arg)
        await (screen.show_markdown(reply.text) if reply.markdown else screen.say(reply.text))

    return run


def _slash(op: Operation) -> SlashCommand:
    handler = HANDLERS.get(op.name) or _shared(op)
    return SlashCommand(
        op.name,
        op.usage,
        op.help,
        handler,
        op.choices,
        op.arg is not None and op.arg.integer,
        op.idle_only,
        palette=op.palette,
    )


_CUSTOM: dict[str, SlashCommand] = {}


class _Commands(Mapping[str, SlashCommand]):
    """The registry's TUI operations, then the workspace's custom commands; read
    afresh at each use, so an operation registered later is here too."""

    def _table(self) -> dict[str, SlashCommand]:
        table = {op.name: _slash(op) for op in offered("tui")}
        table.update((n, c) for n, c in _CUSTOM.items() if n not in table)
        return table

    def __getitem__(self, name: str) -> SlashCommand:
        return self._table()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


COMMANDS: Mapping[str, SlashCommand] = _Commands()
"""Every command by name, in declaration order (the order ``/help`` lists them)."""


CUSTOM_NOTES: list[str] = []
"""Custom commands not registered (a built-in has the name), for ``/help``."""


def register_custom(custom: CustomCommands) -> None:
    """Make the workspace's custom commands slash commands (replacing earlier ones)."""
    _CUSTOM.clear()
    CUSTOM_NOTES.clear()
    for cmd in custom.commands:
        if cmd.name in REGISTRY:
            CUSTOM_NOTES.append(
                f"custom command {cmd.path} skipped: /{cmd.name} is a built-in command"
            )
            continue

        async def send(screen: CommandScreen, arg: str, cmd: CustomCommand = cmd) -> None:
            screen.send(cmd.expand(arg))

        _CUSTOM[cmd.name] = SlashCommand(cmd.name, cmd.usage, cmd.description, send, custom=True)


class CommandError(OperationError):
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
    rows = "\n".join(
        f"| `{c.usage}` | {c.help}{' (custom)' if c.custom else ''} |" for c in COMMANDS.values()
    )
    skipped = "".join(f"\n\n{note}" for note in CUSTOM_NOTES)
    return (
        "| command | what it does |\n|---|---|\n"
        + rows
        + skipped
        + "\n\n`@path` mentions a workspace file (Tab completes); `@shot.png` (or a pasted "
        "image path) attaches the image to the message. Enter sends, Shift+Enter "
        "or Ctrl+J starts a new line, Ctrl+O unfolds pasted chips; Up/Down on the first/last "
        "line walk the prompt history. Text sent while a turn runs is queued; Ctrl+S sends "
        "it into the running turn. F2 toggles the engine panel, ctrl+t the thinking "
        "blocks, ctrl+p opens the command palette, escape stops a running turn."
    )


# -- the commands ----------------------------------------------------------------


@handles("help")
async def _help(screen: CommandScreen, arg: str) -> None:
    await screen.show_markdown(help_markdown())


@handles("clear")
async def _clear(screen: CommandScreen, arg: str) -> None:
    await screen.new_conversation()


@handles("model")
async def _model(screen: CommandScreen, arg: str) -> None:
    if arg:
        screen.with_agent(lambda agent: agent.set_model(arg))
        screen.model_changed(arg)
        await screen.say(f"model: {arg}")
        return
    current = screen.agent.model if screen.agent else screen.engine_view.model
    await screen.say(f"model: {current or 'not known yet'}")


@handles("approve")
async def _approve(screen: CommandScreen, arg: str) -> None:
    await _set_mode(screen, arg)


async def _set_mode(screen: CommandScreen, mode: str) -> None:
    notes: list[str] = []

    def apply(agent: AgentPort) -> None:
        note = agent.set_approval_mode(mode)
        if note:
            notes.append(note)

    screen.with_agent(apply)
    shown = screen.agent.approval_mode if screen.agent is not None else mode
    screen.prompt.show_mode(shown)
    await screen.say(f"approval mode: {shown}" + (f" ({notes[0]})" if notes else ""))


@handles("plan")
async def _plan(screen: CommandScreen, arg: str) -> None:
    def remember(agent: AgentPort) -> None:
        if agent.approval_mode != "plan":
            screen.mode_before_plan = agent.approval_mode

    screen.with_agent(remember)
    await _set_mode(screen, "plan")


@handles("act")
async def _act(screen: CommandScreen, arg: str) -> None:
    if screen.agent is None or screen.agent.approval_mode != "plan":
        raise CommandError("not in plan mode (/plan enters it)")
    await _set_mode(screen, screen.mode_before_plan or "sandbox")
    screen.mode_before_plan = None
    screen.send(ACT_PROMPT)


@handles("undo")
async def _undo(screen: CommandScreen, arg: str) -> None:
    if screen.agent is None and screen.resume is None:
        raise CommandError("nothing to undo yet")
    agent = await screen.ensure_agent()  # a resumed conversation's turns can be undone
    text = await agent.undo()
    await screen.redraw()
    await screen.say(text)
    screen.workspace_changed()


@handles("redo")
async def _redo(screen: CommandScreen, arg: str) -> None:
    if screen.agent is None:
        raise CommandError("nothing to redo")
    text = await screen.agent.redo()
    await screen.redraw()
    await screen.say(text)
    screen.workspace_changed()


@handles("instructions")
async def _instructions(screen: CommandScreen, arg: str) -> None:
    loaded = screen.instructions
    if not loaded.files:
        names = " or ".join(FILE_NAMES)
        text = (
            f"No project instructions: no {names} in the workspace or its parents up to "
            "the repository root. `/init` drafts an AGENTS.md."
        )
    else:
        parts = [
            loaded.summary(),
            "",
            "They were read when this session started and stay "
            "as they were for its whole life (the prompt prefix stays cached).",
        ]
        for f in loaded.files:
            parts += [
                "",
                f"### {f.shown}" + (" (cut)" if f.cut else ""),
                "",
                "```markdown",
                f.text.rstrip("\n"),
                "```",
            ]
        text = "\n".join(parts)
    if loaded.notes:
        text += "\n\n" + "\n".join(f"- {note}" for note in loaded.notes)
    await screen.show_markdown(text)


@handles("init")
async def _init(screen: CommandScreen, arg: str) -> None:
    target = screen.workspace / "AGENTS.md"
    if target.exists():
        raise CommandError(f"{target} already exists; /instructions shows what is loaded")
    draft = draft_agents_md(screen.workspace)
    diff = "".join(
        difflib.unified_diff([], draft.splitlines(keepends=True), "/dev/null", "b/AGENTS.md")
    )
    future: asyncio.Future[ApprovalDecision] = asyncio.get_running_loop().create_future()
    request = ApprovalRequested(
        call_id="init-agents-md",
        tool="write_file",
        kind="edit",
        summary="write AGENTS.md (a draft from the repository)",
        detail=diff,
        future=future,
    )
    await screen.say("a draft AGENTS.md: approve to write it (edit it afterwards as you like)")
    decision = await screen.ask(request)
    if not decision.approved:
        await screen.say("AGENTS.md not written")
        return
    target.write_text(draft, encoding="utf-8")
    screen.workspace_changed()
    await screen.say(
        "wrote AGENTS.md; it is read when the next session starts (this one "
        "keeps its system prompt, so its prefix cache stays warm)"
    )


@handles("sessions")
async def _sessions(screen: CommandScreen, arg: str) -> None:
    await screen.open_sessions()


@handles("export")
async def _export(screen: CommandScreen, arg: str) -> None:
    await screen.say(await export_transcript(screen, arg))


@handles("engine")
async def _engine(screen: CommandScreen, arg: str) -> None:
    screen.action_toggle_engine()


@handles("compact")
async def _compact(screen: CommandScreen, arg: str) -> None:
    if screen.agent is None:
        raise CommandError("nothing to compact yet: the conversation is empty")
    await screen.say("compacting the conversation" + (f" (keeping: {arg})" if arg else ""))
    async for event in screen.agent.compact(arg):
        await screen.renderer.handle(event)


@handles("trust")
async def _trust(screen: CommandScreen, arg: str) -> None:
    hooks = project_hooks(screen.workspace)
    screen.trust.trust(screen.workspace)
    listed = (
        "\n".join(f"- `{h.event}` [{h.matcher or '*'}] `{h.command}` ({h.source})" for h in hooks)
        or "(it declares none yet)"
    )
    when = (
        "they run from the first prompt on"
        if screen.agent is None
        else "this session keeps the hooks it started with; they run in the next one"
    )
    await screen.show_markdown(f"trusted {screen.workspace}; {when}. Its hooks:\n\n{listed}")


@handles("image")
async def _image(screen: CommandScreen, arg: str) -> None:
    attachments = screen.attachments
    if arg == "clear":
        count = attachments.clear()
        await screen.say(f"dropped {count} attached image{'s' if count != 1 else ''}")
    elif arg:
        name = arg.strip("'\"")
        await attachments.attach(screen, Path(name), name)
    elif attachments.pending:
        shown = "; ".join(image.describe() for image in attachments.pending)
        await screen.say(f"attached for the next message: {shown}")
    else:
        await screen.say(
            "no image attached: /image PATH, @shot.png in the prompt, or paste an image file's path"
        )
