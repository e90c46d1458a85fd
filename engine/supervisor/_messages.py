"""Every "already running" / "not running" sentence of engine access, in one place.

The supervisor, :mod:`._access` and the product's callers (``run``, the TUI, replay,
bench, the quantizer's capture) all phrase a busy or missing engine with these, so a
user sees one wording whichever command refused.
"""

from __future__ import annotations

from engine.errors import EngineStateError

STOP_FIRST = "stop it first with `sparkcode engine stop`"
NO_ENGINE = "no engine is running; start one with `sparkcode engine start`"


def already_running(
    pid: int | None,
    profile: str | None,
    base_url: str | None,
    *,
    why: str | None = None,
    instead: str | None = None,
) -> EngineStateError:
    """An engine runs where the caller wanted to start one (or one of another profile).

    ``why`` says why this caller starts its own engine; ``instead`` offers the other way
    out (use the running one).
    """
    text = f"an engine is already running: pid {pid}, profile {profile}, {base_url}; "
    if why:
        text += f"{why}: "
    text += STOP_FIRST
    if instead:
        text += f", or {instead}"
    return EngineStateError(text)


def use_running_instead(profile: str | None) -> str:
    """The way out of a same-profile refusal: name the running engine's profile."""
    return f"use the running one with --profile {profile}"


def not_an_engine(profile: str, base_url: str) -> EngineStateError:
    """An endpoint profile names a server sparkcode does not run."""
    return EngineStateError(
        f"profile {profile} is an endpoint ({base_url}); there is no engine to start"
    )


def no_engine() -> EngineStateError:
    """Nothing runs and the caller may not start an engine."""
    return EngineStateError(NO_ENGINE)


def not_ready(state: str) -> EngineStateError:
    """The caller wants the running engine as it is, and it is not ready."""
    return EngineStateError(
        f"the managed engine is {state}; start it with `sparkcode engine start`, "
        "or name a target with --profile NAME or --endpoint URL"
    )


def degraded(pid: int | None, profile: str | None) -> EngineStateError:
    """A two-node engine whose worker died: the head still answers /health, but its
    next request fails, so it is not reused."""
    return EngineStateError(
        f"the running engine (pid {pid}, profile {profile}) is degraded: its worker node "
        f"is down; {STOP_FIRST} and start it again"
    )


def crashed_note(exit_code: int | None) -> str:
    code = exit_code if exit_code is not None else "unknown"
    return f"the last engine crashed (exit code {code}); starting a new one"


def waiting_note(profile: str | None) -> str:
    return f"waiting for the engine ({profile}) to become ready ..."


def starting_note(profile: str, base_url: str) -> str:
    return f"starting engine {profile} on {base_url} ..."
