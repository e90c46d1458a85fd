"""``!cmd`` typed in the prompt: the user's own shell command, run by the agent under
the shell tool's rules (``AgentPort.run_shell``: sandbox, ``[permissions]``, approval
cards), drawn as a tool card; its output goes with the next message. It runs in the
turn's place (worker group ``turn``), so Escape stops it and messages typed meanwhile
queue. The screen is seen through :class:`ShellScreen`, so this module does not import
the screen that owns it."""

from __future__ import annotations

import asyncio
from typing import Protocol

from sparkcode.agent.core.user_shell import EMPTY

from .agent_port import AgentPort
from .turn import TurnRenderer
from .widgets.approval import ApprovalStack
from .widgets.conversation import Conversation
from .widgets.engine_panel import EngineView


class ShellScreen(Protocol):
    """What ``!cmd`` needs of the main screen."""

    @property
    def conversation(self) -> Conversation: ...

    @property
    def approvals(self) -> ApprovalStack: ...

    @property
    def renderer(self) -> TurnRenderer: ...

    turn_running: bool

    async def ensure_agent(self) -> AgentPort: ...


def refusal(command: str, *, turn_running: bool, view: EngineView) -> str | None:
    """Why ``!command`` cannot run now (the prompt keeps it), or None."""
    if not command.strip():
        return EMPTY
    if turn_running:
        return "a turn is running: wait for it to end (or press escape) to run a ! command"
    state = view.status.state
    if view.managed and state != "ready":
        return (
            f"the engine is {state}: ! commands run through the agent, which connects "
            "once the engine is ready (F2 shows the engine)"
        )
    return None


async def run_shell_escape(screen: ShellScreen, command: str, serial: int) -> None:
    """Show ``!command``, run it through the agent and draw its events."""
    conv = screen.conversation
    await conv.add_user(f"!{command}")
    try:
        agent = await screen.ensure_agent()
        stream = agent.run_shell(command, serial)
        try:
            async for event in stream:
                await screen.renderer.handle(event)
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
    except asyncio.CancelledError:
        await conv.add_notice(f"!{command} stopped (its processes were killed)")
        raise
    except Exception as exc:  # shown, never fatal
        await conv.add_error(f"!{command} failed: {type(exc).__name__}: {exc}")
    finally:
        screen.approvals.drop_all()
        screen.turn_running = False
