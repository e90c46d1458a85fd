"""Which engine a rerun talks to: an endpoint, the managed engine, or profiles
started one after another by the supervisor."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from engine.errors import EngineStateError, UserError
from engine.paths import Paths
from engine.profiles import load_profile, render
from engine.supervisor import Supervisor

from ._rerun import Target

Launcher = Callable[[str], contextlib.AbstractContextManager[Target]]
"""Starts the engine of a profile, yields how to reach it, stops it afterwards."""


def endpoint_target(url: str, model: str | None = None,
                    api_key_env: str | None = None) -> Target:
    if not url.startswith(("http://", "https://")):
        raise UserError(f"--endpoint must be an http(s) URL, got {url!r}")
    base = url.rstrip("/")
    if not base.endswith("/v1"):
        base += "/v1"
    return Target(label=base, base_url=base, model=model, api_key_env=api_key_env)


def managed_target(paths: Paths) -> Target:
    """The running managed engine (the default when no target is named)."""
    status = Supervisor(paths).status()
    if status.state != "ready" or status.base_url is None:
        raise EngineStateError(
            f"the managed engine is {status.state}; start it with `sparkcode engine start`, "
            "or pass --endpoint URL or --profile NAME"
        )
    return Target(label=status.profile or status.base_url, base_url=status.base_url,
                  model=status.model)


@contextlib.contextmanager
def supervised_profile(name: str, paths: Paths, *, timeout: float = 900.0,
                       on_phase: Callable[[str], None] | None = None) -> Iterator[Target]:
    """Start profile ``name`` via the supervisor, yield its target, stop it."""
    profile = load_profile(name, paths)
    spec = render(profile, paths)
    if profile.kind == "endpoint":
        yield Target(label=name, base_url=spec.base_url, model=spec.model,
                     api_key_env=spec.api_key_env)
        return
    supervisor = Supervisor(paths)
    current = supervisor.status()
    if current.state not in ("stopped", "crashed"):
        raise EngineStateError(
            f"an engine is already running (profile {current.profile}); rerunning against "
            "--profile starts each configuration itself: stop it first with "
            "`sparkcode engine stop`"
        )
    from engine.models import prepare_model

    prepare_model(profile, paths, progress=on_phase or (lambda _msg: None))
    status = supervisor.start(profile, spec, timeout=timeout, on_phase=on_phase)
    try:
        assert status.base_url is not None
        yield Target(label=name, base_url=status.base_url, model=status.model)
    finally:
        with contextlib.suppress(EngineStateError):
            supervisor.stop()


def profile_launcher(paths: Paths, **kwargs: Any) -> Launcher:
    def launch(name: str) -> contextlib.AbstractContextManager[Target]:
        return supervised_profile(name, paths, **kwargs)

    return launch
