"""The slash commands, each declared once together with its handler.

A command is a :class:`SlashCommand` registered with :func:`command` on an
``async def handler(screen, arg)``; parsing, completion, ``/help``, the command
palette (``palette.py``) and the main screen's dispatch all read :data:`COMMANDS`.
To add one::

    @command("plan", "/plan on|off", "plan before editing", choices=("on", "off"))
    async def _plan(screen: CommandScreen, arg: str) -> None:
        screen.with_agent(lambda agent: ...)
        await screen.say(f"plan mode: {arg}")

Handlers see the screen only through :class:`CommandScreen`, the small protocol of
what they use (``say``, ``with_agent``, ``agent``...), so this module imports no
screen and the screen, completion and the prompt can import it without a circle;
a handler that raises :class:`CommandError` (or anything else) is reported in the
conversation as ``/name failed: ...``.
"""

from __future__ import annotations

import asyncio
import difflib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from engine.paths import Paths
from sparkcode.agent.agents_md import draft_agents_md
from sparkcode.agent.events import ApprovalDecision, ApprovalRequested, Event
from sparkcode.agent.instructions import FILE_NAMES, Instructions
from sparkcode.agent.loop import ACT_PROMPT
from sparkcode.config import PERMISSION_MODES
from sparkcode.custom_commands import CustomCommand, CustomCommands
from sparkcode.hook_specs import project_hooks
from sparkcode.replay import Rebuilt
from sparkcode.sessions import SessionStore
from sparkcode.trust import TrustStore

from .agent_port import AgentPort
from .attach import Attachments, Surface
from .exporting import USAGE as EXPORT_USAGE
from .exporting import export_transcript

APPROVAL_MODES: tuple[str, ...] = PERMISSION_MODES
EFFORTS: tuple[str, ...] = ("low", "high", "max")
DEGENERATE: tuple[str, ...] = ("stop", "warn", "off")



class _ModeShown(Protocol):
    def show_mode(self, mode: str) -> None: ...


class _ModelNamed(Protocol):
    @property
    def model(self) -> str | None: ...


class _EventShown(Protocol):
    async def handle(self, event: Event) -> None: ...


class CommandScreen(Surface, Protocol):
    """What a slash-command handler needs from the screen (the main screen is one).

    A protocol, not the screen's class: the screen dispatches to the handlers, so
    naming the screen here would close an import circle through completion and
    the prompt (the import-rule test forbids any)."""

    workspace: Path
    """Where the agent's tools work."""
    resume: Rebuilt | None
    """The recorded conversation the next agent continues, until it is built."""
    mode_before_plan: str | None
    """The approval mode /plan left, for /act to go back to."""
    agent: AgentPort | None
    """The agent, once built."""
    sessions: SessionStore
    """The recorded sessions (``/export`` finds this one's recording there)."""

    @property
    def engine_view(self) -> _ModelNamed:
        """The latest engine snapshot (its model, before the agent knows one)."""

    @property
    def instructions(self) -> Instructions: ...

    @property
    def attachments(self) -> Attachments: ...

    @property
    def prompt(self) -> _ModeShown: ...

    @property
    def renderer(self) -> _EventShown: ...

    def with_agent(self, apply: Callable[[AgentPort], None]) -> None: ...

    async def show_markdown(self, text: str) -> None: ...

    def model_changed(self, model: str) -> None: ...

    def workspace_changed(self) -> None: ...

    async def ask(self, request: ApprovalRequested) -> ApprovalDecision: ...

    async def new_conversation(self) -> None: ...

    async def redraw(self) -> None: ...

    async def open_sessions(self) -> None: ...

    def action_toggle_engine(self) -> None: ...

    def send(self, text: str) -> None: ...


Handler = Callable[[CommandScreen, str], Awaitable[None]]


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
    custom: bool = False
    """A Markdown file's command (:mod:`sparkcode.custom_commands`): sends its prompt."""
    palette: str = ""
    """Its title in the command palette (``palette.py``; empty: ``/name``)."""


COMMANDS: dict[str, SlashCommand] = {}
"""Every command by name, in declaration order (the order ``/help`` lists them)."""


def command(name: str, usage: str, help: str, *, choices: tuple[str, ...] = (),
            integer: bool = False, idle_only: bool = False,
            palette: str = "") -> Callable[[Handler], Handler]:
    """Declare a slash command with the decorated coroutine as its handler."""

    def register(handler: Handler) -> Handler:
        if name in COMMANDS:
            raise ValueError(f"slash command /{name} is declared twice")
        COMMANDS[name] = SlashCommand(name, usage, help, handler, choices, integer, idle_only,
                                      palette=palette)
        return handler

    return register


CUSTOM_NOTES: list[str] = []
"""Custom commands not registered (a built-in has the name), for ``/help``."""


def register_custom(custom: CustomCommands) -> None:
    """Make the workspace's custom commands slash commands (replacing earlier ones)."""
    for name in [n for n, c in COMMANDS.items() if c.custom]:
        del COMMANDS[name]
    CUSTOM_NOTES.clear()
    for cmd in custom.commands:
        if cmd.name in COMMANDS:
            CUSTOM_NOTES.append(f"custom command {cmd.path} skipped: /{cmd.name} is a "
                                "built-in command")
            continue

        async def send(screen: CommandScreen, arg: str, cmd: CustomCommand = cmd) -> None:
            screen.send(cmd.expand(arg))

        COMMANDS[cmd.name] = SlashCommand(cmd.name, cmd.usage, cmd.description, send,
                                          custom=True)


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
    rows = "\n".join(f"| `{c.usage}` | {c.help}{' (custom)' if c.custom else ''} |"
                     for c in COMMANDS.values())
    skipped = "".join(f"\n\n{note}" for note in CUSTOM_NOTES)
    return (
        "| command | what it does |\n|---|---|\n" + rows + skipped
        + "\n\n`@path` mentions a workspace file (Tab completes); `@shot.png` (or a pasted "
        "image path) attaches the image to the message. Enter sends, Shift+Enter "
        "or Ctrl+J starts a new line, Ctrl+O unfolds pasted chips; Up/Down on the first/last "
        "line walk the prompt history. Text sent while a turn runs is queued; Ctrl+S sends "
        "it into the running turn. F2 toggles the engine panel, ctrl+t the thinking "
        "blocks, ctrl+p opens the command palette, escape stops a running turn."
    )


# -- the commands ----------------------------------------------------------------


@command("help", "/help", "show the commands and key bindings", palette="Help")
async def _help(screen: CommandScreen, arg: str) -> None:
    await screen.show_markdown(help_markdown())


@command("clear", "/clear", "start a new conversation", idle_only=True,
         palette="Clear conversation")
async def _clear(screen: CommandScreen, arg: str) -> None:
    await screen.new_conversation()


@command("effort", "/effort low|high|max", "set the reasoning effort", choices=EFFORTS,
         palette="Reasoning effort")
async def _effort(screen: CommandScreen, arg: str) -> None:
    screen.with_agent(lambda agent: agent.set_reasoning_effort(arg))
    await screen.say(f"reasoning effort: {arg}")


@command("budget", "/budget N", "set the thinking token budget (0: no thinking)", integer=True)
async def _budget(screen: CommandScreen, arg: str) -> None:
    screen.with_agent(lambda agent: agent.set_thinking_token_budget(int(arg)))
    await screen.say(f"thinking budget: {int(arg)} tokens")


@command("model", "/model [NAME]", "show or set the model requests ask for")
async def _model(screen: CommandScreen, arg: str) -> None:
    if arg:
        screen.with_agent(lambda agent: agent.set_model(arg))
        screen.model_changed(arg)
        await screen.say(f"model: {arg}")
        return
    current = screen.agent.model if screen.agent else screen.engine_view.model
    await screen.say(f"model: {current or 'not known yet'}")


@command("approve", "/approve " + "|".join(APPROVAL_MODES),
         "set which tool calls need approval (docs/agent.md)", choices=APPROVAL_MODES,
         palette="Approval mode")
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


@command("plan", "/plan", "plan mode: only read-only tools run; the model answers with a "
         "plan and a todo list (/act carries it out)")
async def _plan(screen: CommandScreen, arg: str) -> None:
    def remember(agent: AgentPort) -> None:
        if agent.approval_mode != "plan":
            screen.mode_before_plan = agent.approval_mode

    screen.with_agent(remember)
    await _set_mode(screen, "plan")


@command("act", "/act", "approve the plan: leave plan mode and let the model carry it out",
         idle_only=True)
async def _act(screen: CommandScreen, arg: str) -> None:
    if screen.agent is None or screen.agent.approval_mode != "plan":
        raise CommandError("not in plan mode (/plan enters it)")
    await _set_mode(screen, screen.mode_before_plan or "sandbox")
    screen.mode_before_plan = None
    screen.send(ACT_PROMPT)


@command("degenerate", "/degenerate stop|warn|off",
         "what a looping or garbled stream does: stop it, only warn, or not watch",
         choices=DEGENERATE)
async def _degenerate(screen: CommandScreen, arg: str) -> None:
    screen.with_agent(lambda agent: agent.set_degenerate_mode(arg))
    await screen.say(f"degenerate streams: {arg}")


@command("undo", "/undo", "take the last turn back: its messages and its file changes",
         idle_only=True, palette="Undo last turn")
async def _undo(screen: CommandScreen, arg: str) -> None:
    if screen.agent is None and screen.resume is None:
        raise CommandError("nothing to undo yet")
    agent = await screen.ensure_agent()  # a resumed conversation's turns can be undone
    text = await agent.undo()
    await screen.redraw()
    await screen.say(text)
    screen.workspace_changed()


@command("redo", "/redo", "bring back the turn /undo took back (messages and files)",
         idle_only=True, palette="Redo turn")
async def _redo(screen: CommandScreen, arg: str) -> None:
    if screen.agent is None:
        raise CommandError("nothing to redo")
    text = await screen.agent.redo()
    await screen.redraw()
    await screen.say(text)
    screen.workspace_changed()


@command("thinking-history", "/thinking-history on|off",
         "send the model's reasoning back between the tool calls of a turn",
         choices=("on", "off"))
async def _thinking_history(screen: CommandScreen, arg: str) -> None:
    screen.with_agent(lambda agent: agent.set_thinking_history(arg == "on"))
    await screen.say(f"thinking history: {arg} (reasoning is "
                     f"{'sent back within a turn' if arg == 'on' else 'not sent back'})")


@command("instructions", "/instructions", "show the project instructions (AGENTS.md) loaded",
         palette="Project instructions")
async def _instructions(screen: CommandScreen, arg: str) -> None:
    loaded = screen.instructions
    if not loaded.files:
        names = " or ".join(FILE_NAMES)
        text = (f"No project instructions: no {names} in the workspace or its parents up to "
                "the repository root. `/init` drafts an AGENTS.md.")
    else:
        parts = [loaded.summary(), "", "They were read when this session started and stay "
                 "as they were for its whole life (the prompt prefix stays cached)."]
        for f in loaded.files:
            parts += ["", f"### {f.shown}" + (" (cut)" if f.cut else ""), "", "```markdown",
                      f.text.rstrip("\n"), "```"]
        text = "\n".join(parts)
    if loaded.notes:
        text += "\n\n" + "\n".join(f"- {note}" for note in loaded.notes)
    await screen.show_markdown(text)


@command("init", "/init", "draft an AGENTS.md from the repository, to approve", idle_only=True)
async def _init(screen: CommandScreen, arg: str) -> None:
    target = screen.workspace / "AGENTS.md"
    if target.exists():
        raise CommandError(f"{target} already exists; /instructions shows what is loaded")
    draft = draft_agents_md(screen.workspace)
    diff = "".join(difflib.unified_diff([], draft.splitlines(keepends=True), "/dev/null",
                                        "b/AGENTS.md"))
    future: asyncio.Future[ApprovalDecision] = asyncio.get_running_loop().create_future()
    request = ApprovalRequested(call_id="init-agents-md", tool="write_file", kind="edit",
                                summary="write AGENTS.md (a draft from the repository)",
                                detail=diff, future=future)
    await screen.say("a draft AGENTS.md: approve to write it (edit it afterwards as you like)")
    decision = await screen.ask(request)
    if not decision.approved:
        await screen.say("AGENTS.md not written")
        return
    target.write_text(draft, encoding="utf-8")
    screen.workspace_changed()
    await screen.say("wrote AGENTS.md; it is read when the next session starts (this one "
                     "keeps its system prompt, so its prefix cache stays warm)")


@command("sessions", "/sessions", "browse recorded sessions", palette="Sessions")
async def _sessions(screen: CommandScreen, arg: str) -> None:
    await screen.open_sessions()


@command("export", EXPORT_USAGE, "write this session's transcript (Markdown or HTML: turns, "
         "thinking, tool calls, figures) and say where", palette="Export transcript")
async def _export(screen: CommandScreen, arg: str) -> None:
    await screen.say(await export_transcript(screen, arg))


@command("engine", "/engine", "show or hide the engine panel", palette="Engine panel")
async def _engine(screen: CommandScreen, arg: str) -> None:
    screen.action_toggle_engine()


@command("compact", "/compact [FOCUS]", "summarise the conversation now to free context "
         "(FOCUS: what the summary must keep); the open todo list is kept word for word",
         idle_only=True)
async def _compact(screen: CommandScreen, arg: str) -> None:
    if screen.agent is None:
        raise CommandError("nothing to compact yet: the conversation is empty")
    await screen.say("compacting the conversation" + (f" (keeping: {arg})" if arg else ""))
    async for event in screen.agent.compact(arg):
        await screen.renderer.handle(event)


@command("context", "/context", "show what fills the context window, part by part")
async def _context(screen: CommandScreen, arg: str) -> None:
    if screen.agent is None:
        raise CommandError("no conversation yet: /context shows the parts once the agent "
                           "is connected (after the first prompt)")
    await screen.show_markdown(screen.agent.context_report())


@command("trust", "/trust", "trust this project: its hooks (.sparkcode/hooks.toml, "
         ".claude/settings.json) run in sessions started from now on")
async def _trust(screen: CommandScreen, arg: str) -> None:
    hooks = project_hooks(screen.workspace)
    TrustStore(Paths.from_env().state_dir).trust(screen.workspace)
    listed = "\n".join(f"- `{h.event}` [{h.matcher or '*'}] `{h.command}` ({h.source})"
                       for h in hooks) or "(it declares none yet)"
    when = ("they run from the first prompt on" if screen.agent is None else
            "this session keeps the hooks it started with; they run in the next one")
    await screen.show_markdown(f"trusted {screen.workspace}; {when}. Its hooks:\n\n{listed}")


@command("image", "/image [PATH|clear]", "attach an image (PNG, JPEG or WebP) to the next "
         "message; alone: list the attached ones; clear: drop them")
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
        await screen.say("no image attached: /image PATH, @shot.png in the prompt, or paste "
                         "an image file's path")


@command("jobs", "/jobs [stop N]", "list the background jobs the model started (state, pid, "
         "command); stop N ends job N and its processes", palette="Background jobs")
async def _jobs(screen: CommandScreen, arg: str) -> None:
    if screen.agent is None:
        raise CommandError("no background jobs: the conversation has not started")
    if not arg:
        await screen.show_markdown(screen.agent.jobs_report())
        return
    verb, _, number = arg.partition(" ")
    if verb != "stop" or not number.strip().isdigit():
        raise CommandError("usage: /jobs [stop N]")
    await screen.say(await screen.agent.stop_job(int(number)))
