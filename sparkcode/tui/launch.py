"""From command-line options to a ready-to-run :class:`SparkcodeApp`."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from engine.errors import UserError
from engine.paths import Paths
from engine.profiles import default_profile_name, load_profile, render
from sparkcode.config import load_config

from .agent_adapter import AgentTarget, connect
from .agent_port import AgentPort
from .app import SparkcodeApp, TuiSettings
from .engine_control import EngineControl, ExternalEndpoint, ManagedEngine


@dataclass(frozen=True)
class LaunchOptions:
    """The ``sparkcode`` command's options."""

    workspace: Path
    profile: str | None = None
    endpoint: str | None = None
    model: str | None = None
    api_key_env: str | None = None


def build_app(options: LaunchOptions, paths: Paths | None = None) -> SparkcodeApp:
    """Resolve the engine (endpoint or profile) and build the app; nothing starts yet."""
    paths = paths or Paths.from_env()
    workspace = options.workspace.expanduser().resolve()
    if not workspace.is_dir():
        raise UserError(f"workspace {workspace} is not a directory")
    engine: EngineControl
    if options.endpoint:
        engine = ExternalEndpoint(options.endpoint, options.model)
        target = AgentTarget(options.endpoint, workspace, options.model, options.api_key_env)
        settings = TuiSettings(workspace, endpoint=options.endpoint, model=options.model)
    else:
        name = options.profile or load_config(paths).profile or default_profile_name()
        profile = load_profile(name, paths)
        spec = render(profile, paths)
        model = options.model or spec.model or None
        defaults = profile.agent
        target = AgentTarget(spec.base_url, workspace, model,
                             options.api_key_env or spec.api_key_env,
                             defaults.reasoning_effort, defaults.thinking_token_budget)
        if profile.kind == "endpoint":
            engine = ExternalEndpoint(spec.base_url, model)
            settings = TuiSettings(workspace, endpoint=spec.base_url, model=model)
        else:
            engine = ManagedEngine(paths, profile)
            settings = TuiSettings(workspace, model=model, auto_start=True)

    async def agent_factory() -> AgentPort:
        # A managed engine may already run on another port than the profile's.
        status = await asyncio.to_thread(engine.status)
        base_url = status.base_url if engine.managed and status.base_url else target.base_url
        model = status.model if engine.managed and status.model else target.model
        return await connect(AgentTarget(base_url, target.workspace, model, target.api_key_env,
                                         target.reasoning_effort, target.thinking_token_budget),
                             paths)

    return SparkcodeApp(settings, engine, agent_factory)
