"""From command-line options to a ready-to-run :class:`SparkcodeApp`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from engine.paths import Paths
from engine.profiles import render
from sparkcode.agent.extensions.instructions import load_instructions
from sparkcode.replay import Rebuilt
from sparkcode.start import StartTarget, resolve_target
from sparkcode.worktree import Worktree, find_worktree

from .agent_adapter import connect
from .agent_port import AgentPort, SessionRequest
from .app import SparkcodeApp, TuiSettings
from .asking import user_asker
from .commands import register_custom
from .engine_control import EngineControl, ExternalEndpoint, engine_control
from .trusting import trust_asker


@dataclass(frozen=True)
class LaunchOptions:
    """The ``sparkcode`` command's options."""

    workspace: Path
    profile: str | None = None
    endpoint: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    resume: Rebuilt | None = None
    """Open with this recorded conversation (``--continue`` / ``--resume``)."""
    vision: bool = False
    """``--vision``: the ``--endpoint``'s model takes images."""
    worktree: Worktree | None = None
    """``--worktree``: the git worktree the session works in (its ``workspace``)."""


def build_app(options: LaunchOptions, paths: Paths) -> SparkcodeApp:
    """Resolve the engine (endpoint or profile) and build the app; nothing starts yet.

    The config and the profile are read once here (:func:`resolve_target`); the
    engine panel and the agent's session builder share them; ``paths`` is the one the
    front resolved.
    """
    target = resolve_target(
        options.workspace,
        paths,
        profile=options.profile,
        endpoint=options.endpoint,
        model=options.model,
        api_key_env=options.api_key_env,
        vision=options.vision,
        worktree=options.worktree,
    )
    engine, settings = _engine_for(target, paths)
    register_custom(target.commands)

    built: list[SparkcodeApp] = []
    ask_trust = trust_asker(lambda: built[0] if built else None)
    asker = user_asker(lambda: built[0] if built else None)  # ask_user's card

    async def agent_factory(request: SessionRequest) -> AgentPort:
        here = target
        if request.workspace is not None and request.workspace != target.workspace:
            # Resuming a session of another workspace (the user said yes).
            here = replace(
                target,
                workspace=request.workspace,
                instructions=load_instructions(request.workspace),
                worktree=find_worktree(request.workspace),
            )
        return await connect(here, paths, resume=request.resume, ask_trust=ask_trust, asker=asker)

    settings = replace(
        settings,
        instructions=target.instructions,
        notify=target.config.notify,
        keys=target.config.keys,
    )
    app = SparkcodeApp(settings, engine, agent_factory, resume=options.resume)
    built.append(app)
    return app


def _engine_for(target: StartTarget, paths: Paths) -> tuple[EngineControl, TuiSettings]:
    workspace = target.workspace
    engine = engine_control(target.target, paths)
    if isinstance(engine, ExternalEndpoint):
        return engine, TuiSettings(workspace, paths, endpoint=engine.base_url, model=engine.model)
    to = target.target
    assert to.profile is not None  # a managed target has its profile
    model = to.model or render(to.profile, paths).model or None
    return engine, TuiSettings(workspace, paths, model=model, auto_start=True)
