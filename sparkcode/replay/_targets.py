"""Which engine a rerun talks to: an endpoint, the managed engine, or profiles
started one after another through engine access (:mod:`sparkcode.target`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from engine.paths import Paths
from engine.supervisor import Reuse
from sparkcode.target import Target

Launcher = Callable[[str], contextlib.AbstractContextManager[Target]]
"""Starts the engine of a profile, yields how to reach it, stops it afterwards."""

RERUN_STARTS_ITS_OWN = "rerunning against --profile starts each configuration itself"
"""Why ``--profile`` refuses a running engine (:attr:`Reuse.NEVER`): each configuration
is measured on an engine of its own, cold."""


def endpoint_target(url: str, model: str | None = None, api_key_env: str | None = None) -> Target:
    return Target.for_endpoint(url, model, api_key_env)


def managed_target(paths: Paths) -> Target:
    """The running managed engine (the default when no target is named)."""
    return Target.running_engine(paths)


@contextlib.contextmanager
def supervised_profile(
    name: str,
    paths: Paths,
    *,
    timeout: float = 900.0,
    on_phase: Callable[[str], None] | None = None,
) -> Iterator[Target]:
    """Start profile ``name``'s own engine, yield its target, stop it afterwards."""
    target = Target.for_profile(name, paths, reuse=Reuse.NEVER, label=name)
    with target.opened(
        paths, progress=on_phase, on_phase=on_phase, timeout=timeout, why=RERUN_STARTS_ITS_OWN
    ) as reached:
        yield reached


def profile_launcher(paths: Paths, **kwargs: Any) -> Launcher:
    def launch(name: str) -> contextlib.AbstractContextManager[Target]:
        return supervised_profile(name, paths, **kwargs)

    return launch
