"""Engine access: "make sure an engine serves this profile, starting it if needed".

Every way sparkcode reaches a managed engine goes through here: ``sparkcode run`` and
``acp`` (via the product's ``Target``), the TUI's Start, ``sparkcode engine start``,
replay's and bench's ``--profile``, the quantizer's capture, the benches in ``bench/``
and the test fixtures. A new way to start an engine is one call,
:func:`ensure_running` (the engine outlives the caller) or :func:`running` (it is
stopped afterwards, if this call started it).

What a running engine means to a caller is one of three named rules, :class:`Reuse`;
the sentences a refusal says are in :mod:`._messages`. Only :class:`Supervisor`'s
``status``/``wait_ready``/``start``/``stop`` are used, so an engine the supervisor runs
on two nodes is still one call here.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from engine.paths import Paths
from engine.profiles import LaunchSpec, Profile, render

from ._messages import (
    already_running,
    crashed_note,
    degraded,
    no_engine,
    not_an_engine,
    not_ready,
    starting_note,
    use_running_instead,
    waiting_note,
)
from ._record import EngineRecord
from ._supervisor import EngineStatus, PhaseCallback, Supervisor

Progress = Callable[[str], None]

LIVE_STATES = frozenset({"ready", "booting", "unhealthy", "degraded"})
"""States in which the engine's processes are up (the record's runner is alive); a
``degraded`` two-node engine (worker down) blocks a new start but is never reused."""


class Reuse(enum.StrEnum):
    """What an engine that already runs means to the caller."""

    ANY = "any"
    """Use it, whatever its profile (``run`` without ``--profile``): the engine is
    kept warm on purpose, a GLM boot takes minutes."""
    SAME_PROFILE = "same-profile"
    """Use it if it runs this profile, refuse it otherwise (``run --profile``, bench's
    ``--profile``, which then measures the engine as it is and leaves it running)."""
    NEVER = "never"
    """Refuse it: the caller starts its own engine (``engine start``, the TUI's Start,
    replay's ``--profile``, the capture, a bench script)."""


@dataclass(frozen=True)
class EngineHandle:
    """An engine that serves: its status and whether this process started it."""

    status: EngineStatus
    started: bool
    """True when :func:`ensure_running` launched it (so :func:`running` stops it)."""

    @property
    def base_url(self) -> str:
        assert self.status.base_url is not None  # a live record always has one
        return self.status.base_url

    @property
    def model(self) -> str | None:
        return self.status.model


def ensure_running(
    profile: Profile,
    paths: Paths,
    *,
    reuse: Reuse,
    start: bool = True,
    wait: bool = True,
    port: int | None = None,
    spec: LaunchSpec | None = None,
    timeout: float = 900.0,
    on_phase: PhaseCallback | None = None,
    progress: Progress | None = None,
    skip_memory_check: bool = False,
    prepare: bool = True,
    why: str | None = None,
) -> EngineHandle:
    """An engine serving ``profile``: the running one if ``reuse`` allows, else a new one.

    ``start=False`` refuses to launch (the caller only wants what runs). ``wait=False``
    returns once launched (the TUI watches the boot itself), and does not wait for a
    booting engine it reuses. ``spec`` replaces the rendered launch (``port`` a free
    port, tests a stand-in engine); ``prepare`` converts or checks the model first
    (``engine.models.prepare_model``). ``why`` says, in a refusal, why this caller
    starts its own engine.
    """
    if profile.kind != "vllm":
        raise not_an_engine(profile.name, (spec or render(profile, paths)).base_url)
    say = progress or (lambda _msg: None)
    sup = Supervisor(paths)
    status = sup.status()
    if status.state in LIVE_STATES and status.base_url:
        if reuse is Reuse.NEVER:
            raise already_running(status.pid, status.profile, status.base_url, why=why)
        if reuse is Reuse.SAME_PROFILE and status.profile != profile.name:
            raise already_running(
                status.pid,
                status.profile,
                status.base_url,
                why=why,
                instead=use_running_instead(status.profile),
            )
        if status.state == "degraded":
            raise degraded(status.pid, status.profile)
        if status.state != "ready" and wait:
            say(waiting_note(status.profile))
            status = sup.wait_ready(timeout=timeout, on_phase=on_phase)
        return EngineHandle(status, started=False)
    if not start:
        raise no_engine()
    if status.state == "crashed":
        say(crashed_note(status.exit_code))
        sup.stop()  # clears the stale record and anything its group left behind
    if prepare:
        from engine.models import prepare_model

        prepare_model(profile, paths, progress=say)
    spec = spec or render(profile, paths, port=port)
    say(starting_note(profile.name, spec.base_url))
    status = sup.start(
        profile,
        spec,
        wait=wait,
        timeout=timeout,
        on_phase=on_phase,
        skip_memory_check=skip_memory_check,
    )
    if status.base_url is None:
        status.base_url = spec.base_url
    if status.model is None:
        status.model = spec.model
    return EngineHandle(status, started=True)


def stop_started(paths: Paths, handle: EngineHandle) -> bool:
    """Stop the engine ``handle`` started, and nothing else; True if it stopped one.

    An engine someone stopped and replaced meanwhile has another runner pid: it is
    left alone.
    """
    if not handle.started:
        return False
    sup = Supervisor(paths)
    record = sup.record()
    if record is None or record.pid != handle.status.pid:
        return False
    sup.stop()
    return True


@contextlib.contextmanager
def running(
    profile: Profile,
    paths: Paths,
    *,
    reuse: Reuse = Reuse.NEVER,
    port: int | None = None,
    spec: LaunchSpec | None = None,
    timeout: float = 900.0,
    on_phase: PhaseCallback | None = None,
    progress: Progress | None = None,
    skip_memory_check: bool = False,
    prepare: bool = True,
    why: str | None = None,
) -> Iterator[EngineHandle]:
    """:func:`ensure_running` (waiting until ready) for a block: an engine this call
    started is stopped at its end, or at once if its boot fails (crash, timeout); an
    engine it reused keeps running."""
    before = Supervisor(paths).record()
    try:
        handle = ensure_running(
            profile,
            paths,
            reuse=reuse,
            port=port,
            spec=spec,
            timeout=timeout,
            on_phase=on_phase,
            progress=progress,
            skip_memory_check=skip_memory_check,
            prepare=prepare,
            why=why,
        )
    except BaseException:
        _stop_launched_since(paths, before)
        raise
    try:
        yield handle
    finally:
        stop_started(paths, handle)


def _stop_launched_since(paths: Paths, before: EngineRecord | None) -> None:
    """Stop the engine recorded now if it is not the one ``before`` recorded."""
    sup = Supervisor(paths)
    record = sup.record()
    if record is not None and (before is None or record.pid != before.pid):
        sup.stop()


def attach(paths: Paths) -> EngineStatus:
    """The managed engine as it runs now, ready; it is not started or waited for."""
    status = Supervisor(paths).status()
    if status.state != "ready" or status.base_url is None:
        raise not_ready(status.state)
    return status


def ensure_idle(paths: Paths, why: str) -> None:
    """Refuse (naming the engine) when any engine runs: the caller needs the machine."""
    status = Supervisor(paths).status()
    if status.state in LIVE_STATES:
        raise already_running(status.pid, status.profile, status.base_url, why=why)


__all__ = [
    "EngineHandle",
    "Reuse",
    "attach",
    "ensure_idle",
    "ensure_running",
    "running",
    "stop_started",
]
