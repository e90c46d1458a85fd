"""From command-line options to a ready-to-run :class:`SparkcodeApp`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.errors import UserError
from engine.paths import Paths
from engine.profiles import default_profile_name, load_profile, render
from sparkcode.config import load_config
from sparkcode.connection import normalise_base_url

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
        endpoint = normalise_base_url(options.endpoint)
        engine = ExternalEndpoint(endpoint, options.model)
        settings = TuiSettings(workspace, endpoint=endpoint, model=options.model)
    else:
        name = options.profile or load_config(paths).profile or default_profile_name()
        profile = load_profile(name, paths)
        spec = render(profile, paths)
        model = options.model or spec.model or None
        if profile.kind == "endpoint":
            engine = ExternalEndpoint(spec.base_url, model)
            settings = TuiSettings(workspace, endpoint=spec.base_url, model=model)
        else:
            engine = ManagedEngine(paths, profile)
            settings = TuiSettings(workspace, model=model, auto_start=True)
    target = AgentTarget(workspace, endpoint=options.endpoint, profile=options.profile,
                         model=options.model, api_key_env=options.api_key_env)

    async def agent_factory() -> AgentPort:
        return await connect(target, paths)

    return SparkcodeApp(settings, engine, agent_factory)
