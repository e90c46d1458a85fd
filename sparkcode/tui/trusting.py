"""The TUI's question whether to trust a project's hooks (asked once, remembered).

The session builder asks it (:mod:`sparkcode.hooks.session`) when the first
prompt builds the agent, inside that prompt's worker, so the question is a
:class:`ConfirmScreen` over the conversation; a yes is remembered for the
project's path, a no leaves the hooks unrun with a note naming ``/trust``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.app import App
from textual.worker import NoActiveWorker

from sparkcode.hooks import HookSpec
from sparkcode.hooks.session import AskTrust

from .screens.confirm import ConfirmScreen

SHOWN = 8
"""Hooks listed in the question (the rest counted)."""


def trust_asker(get_app: Callable[[], App[Any] | None]) -> AskTrust:
    """An ``ask_trust`` for the session builder that asks on ``get_app()``'s screen."""

    async def ask(workspace: Path, hooks: tuple[HookSpec, ...]) -> bool:
        app = get_app()
        if app is None:
            return False
        listed = "\n".join(
            f"  {h.event} [{h.matcher or '*'}] {h.command}  ({h.source})" for h in hooks[:SHOWN]
        )
        more = f"\n  ... and {len(hooks) - SHOWN} more" if len(hooks) > SHOWN else ""
        question = (
            f"{workspace} declares hooks: commands sparkcode would run on agent "
            f"events, with your rights.\n\n{listed}{more}\n\nTrust this project and "
            "run them (remembered for this path)?"
        )
        try:
            answer: bool = await app.push_screen_wait(ConfirmScreen(question))
            return answer
        except NoActiveWorker:  # not inside a worker: cannot wait on a screen
            return False

    return ask


__all__ = ["trust_asker"]
