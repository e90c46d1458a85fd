"""A session's hooks: the user's from ``config.toml``, the project's once trusted;
and the one line a front shows for a hook's run (:func:`describe`).

Kept apart from :mod:`sparkcode.start` so the trust question has one home:
the user's hooks always run; the project's (``.sparkcode/hooks.toml``,
``.claude/settings.json``) run when the project is remembered as trusted
(:class:`~sparkcode.hooks.TrustStore`), when the start trusts it
(``run --trust-project``), or when ``ask`` says yes (a terminal's question),
and the answer is remembered. Otherwise they are skipped with a note saying
how to trust the project.

Public and outside the package's ``__init__``: it needs the agent's runner
(:mod:`sparkcode.agent.extensions.hooks`), which needs the declarations from the ``__init__``.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from engine.paths import Paths

from ..agent.core.events import HookRan
from ..agent.extensions.hooks import HookContext, Hooks
from ._specs import HookConfigError, HookSpec, project_hooks
from ._trust import TrustStore

AskTrust = Callable[[Path, tuple[HookSpec, ...]], Awaitable[bool]]
"""Asks the user whether to trust the project's hooks (shown to them)."""


async def session_hooks(
    workspace: Path,
    user: tuple[HookSpec, ...],
    paths: Paths,
    *,
    trust: bool | None,
    ask: AskTrust | None,
    session_id: str | None,
    transcript: Path | None,
) -> tuple[Hooks, list[str]]:
    """The hooks of one session and the notes to show once at start."""
    notes: list[str] = []
    try:
        project = project_hooks(workspace)
    except HookConfigError as exc:  # the project's file is not ours to refuse a start over
        project = ()
        notes.append(f"the project's hooks were not loaded: {exc}")
    specs = list(user)
    if project:
        store = TrustStore(paths.state_dir)
        trusted = trust is True or (trust is None and store.is_trusted(workspace))
        if not trusted and trust is None and ask is not None:
            trusted = await ask(workspace, project)
        if trusted:
            if not store.is_trusted(workspace):
                store.trust(workspace)
            specs += project
            notes.append(
                f"project hooks: {len(project)} from "
                f"{', '.join(sorted({s.source for s in project}))}"
            )
        else:
            notes.append(
                f"the project declares {len(project)} hook(s) in "
                f"{', '.join(sorted({s.source for s in project}))}; they were not run because "
                "the project is not trusted (the TUI's /trust, or `sparkcode run "
                "--trust-project`, trusts it)"
            )
    context = HookContext(
        workspace=workspace,
        session_id=session_id or uuid.uuid4().hex,
        transcript_path=str(transcript) if transcript is not None else "",
    )
    return Hooks(specs, context), notes


def describe(run: HookRan) -> str:
    """One short line for the user: what ran and how it ended."""
    what = f"{run.hook_event} hook `{_short(run.command)}`"
    if run.timed_out:
        return f"{what} timed out after {run.duration_s:.0f}s and was killed"
    if run.exit_code is None:
        return f"{what} failed: {_short(run.stderr, 200)}"
    if run.blocked:
        return f"{what} blocked: {_short(run.stderr, 200) or '(no reason given)'}"
    if run.exit_code != 0:
        return f"{what} failed (exit {run.exit_code}): {_short(run.stderr, 200)}"
    return f"{what} ok" + (f": {_short(run.stdout, 200)}" if run.stdout.strip() else "")


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


__all__ = ["AskTrust", "describe", "session_hooks"]
