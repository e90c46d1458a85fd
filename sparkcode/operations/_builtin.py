"""The built-in operations: every slash command sparkcode has, declared once.

The order is the one ``/help`` lists. An operation written once (a ``setting`` or
a ``query``) runs the same in both fronts; the others are carried out by each
front's handler of that name (``sparkcode.tui.commands``, ``sparkcode.acp._session``),
and a test holds every front's handlers equal to what it offers.
"""

from __future__ import annotations

from typing import get_args

from engine.profiles import ReasoningEffort
from sparkcode.config import DEGENERATE_MODES, PERMISSION_MODES

from ._ops import Ops
from ._registry import Arg, Front, Operation, OperationError, Reply, Setting, register

EFFORTS: tuple[str, ...] = get_args(ReasoningEffort)
"""Every value the ``reasoning_effort`` setting accepts, read from its type."""
EXPORT_USAGE = "/export [md|html] [PATH]"

_TUI: frozenset[Front] = frozenset({"tui"})


def _effort(arg: str) -> Setting:
    return Setting(lambda agent: agent.set_reasoning_effort(arg), f"reasoning effort: {arg}")


def _budget(arg: str) -> Setting:
    return Setting(
        lambda agent: agent.set_thinking_token_budget(int(arg)),
        f"thinking budget: {int(arg)} tokens",
    )


def _degenerate(arg: str) -> Setting:
    return Setting(lambda agent: agent.set_degenerate_mode(arg), f"degenerate streams: {arg}")


def _thinking_history(arg: str) -> Setting:
    what = "sent back within a turn" if arg == "on" else "not sent back"
    return Setting(
        lambda agent: agent.set_thinking_history(arg == "on"),
        f"thinking history: {arg} (reasoning is {what})",
    )


async def _context(agent: Ops, arg: str) -> Reply:
    return Reply(agent.context_report(), markdown=True)


async def _jobs(agent: Ops, arg: str) -> Reply:
    """``/jobs``: the jobs as Markdown; ``/jobs stop N``: end job N, say its state."""
    if not arg:
        return Reply(agent.jobs_report(), markdown=True)
    verb, _, number = arg.partition(" ")
    if verb != "stop" or not number.strip().isdigit():
        raise OperationError("usage: /jobs [stop N]")
    return Reply(await agent.stop_job(int(number)))


_MODES = (
    "ACP: the editor switches the permission mode with session/set_mode (the "
    "session's modes are the approval modes)"
)
_SCREEN = "it works on the TUI's screen"

for _op in (
    Operation(
        "help",
        "show the commands and key bindings",
        fronts=_TUI,
        palette="Help",
        only_here="ACP: the editor lists the commands (available_commands_update)",
    ),
    Operation("clear", "start a new conversation", idle_only=True, palette="Clear conversation"),
    Operation(
        "effort",
        "set the reasoning effort",
        Arg(choices=EFFORTS),
        palette="Reasoning effort",
        setting=_effort,
    ),
    Operation(
        "budget",
        "set the thinking token budget (0: no thinking)",
        Arg("N", integer=True),
        setting=_budget,
    ),
    Operation(
        "model",
        "show or set the model requests ask for",
        Arg("[NAME]"),
        fronts=_TUI,
        only_here="ACP: the editor's session keeps the model it was built with; the "
        "TUI also redraws its status bar",
    ),
    Operation(
        "approve",
        "set which tool calls need approval (docs/agent.md)",
        Arg(choices=PERMISSION_MODES),
        fronts=_TUI,
        palette="Approval mode",
        only_here=_MODES,
    ),
    Operation(
        "plan",
        "plan mode: only read-only tools run; the model answers with a plan and "
        "a todo list (/act carries it out)",
        fronts=_TUI,
        only_here=_MODES,
    ),
    Operation(
        "act", "approve the plan: leave plan mode and let the model carry it out", idle_only=True
    ),
    Operation(
        "degenerate",
        "what a looping or garbled stream does: stop it, only warn, or not watch",
        Arg(choices=DEGENERATE_MODES),
        setting=_degenerate,
    ),
    Operation(
        "undo",
        "take the last turn back: its messages and its file changes",
        idle_only=True,
        palette="Undo last turn",
    ),
    Operation(
        "redo",
        "bring back the turn /undo took back (messages and files)",
        idle_only=True,
        palette="Redo turn",
    ),
    Operation(
        "thinking-history",
        "send the model's reasoning back between the tool calls of a turn",
        Arg(choices=("on", "off")),
        setting=_thinking_history,
    ),
    Operation(
        "instructions",
        "show the project instructions (AGENTS.md) loaded",
        fronts=_TUI,
        palette="Project instructions",
        only_here="ACP: the editor shows the workspace's files itself",
    ),
    Operation(
        "init",
        "draft an AGENTS.md from the repository, to approve",
        idle_only=True,
        fronts=_TUI,
        only_here=f"{_SCREEN}: the draft is approved on a card",
    ),
    Operation(
        "sessions",
        "browse recorded sessions",
        fronts=_TUI,
        palette="Sessions",
        only_here="ACP: the editor lists and loads sessions (session/load)",
    ),
    Operation(
        "export",
        "write this session's transcript (Markdown or HTML: turns, thinking, "
        "tool calls, figures) and say where",
        Arg(EXPORT_USAGE.removeprefix("/export ")),
        palette="Export transcript",
    ),
    Operation(
        "engine",
        "show or hide the engine panel",
        fronts=_TUI,
        palette="Engine panel",
        only_here=f"{_SCREEN}: the panel is the TUI's",
    ),
    Operation(
        "compact",
        "summarise the conversation now to free context (FOCUS: what the "
        "summary must keep); the open todo list is kept word for word",
        Arg("[FOCUS]"),
        idle_only=True,
    ),
    Operation(
        "context",
        "show what fills the context window, part by part",
        query=_context,
        no_agent="no conversation yet: /context shows the parts once the agent is "
        "connected (after the first prompt)",
    ),
    Operation(
        "trust",
        "trust this project: its hooks (.sparkcode/hooks.toml, "
        ".claude/settings.json) run in sessions started from now on",
        fronts=_TUI,
        only_here="ACP: the editor's user decides trust at the TUI or config.toml; "
        "an editor session starts already built",
    ),
    Operation(
        "image",
        "attach an image (PNG, JPEG or WebP) to the next message; alone: list "
        "the attached ones; clear: drop them",
        Arg("[PATH|clear]"),
        fronts=_TUI,
        only_here="ACP: the editor sends images as prompt content blocks",
    ),
    Operation(
        "jobs",
        "list the background jobs the model started (state, pid, command); stop "
        "N ends job N and its processes",
        Arg("[stop N]"),
        palette="Background jobs",
        query=_jobs,
        no_agent="no background jobs: the conversation has not started",
    ),
):
    register(_op)

__all__ = ["EFFORTS", "EXPORT_USAGE"]
