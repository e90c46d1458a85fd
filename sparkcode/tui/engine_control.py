"""What the TUI can ask of an engine: its status, start, stop.

Every method blocks (process checks, HTTP health probes, model conversion),
so the app calls them from thread workers only.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import httpx

from engine.pagemath import prefix_cache_math
from engine.paths import Paths
from engine.profiles import Profile, load_profile
from engine.supervisor import EngineStatus, Reuse, Supervisor, ensure_running, tail_lines
from sparkcode.target import Target

Progress = Callable[[str], None]
LOG_TAIL = 30
"""Engine log lines the panel shows."""
_POLL_LINE = re.compile(r'"GET /(health|metrics|v1/models) HTTP')
_VLLM_PREFIX = re.compile(r"^\((\w+) pid=\d+\) (\w+) \d\d-\d\d [\d:]+ \[[^\]]*\] ")
_UVICORN_PREFIX = re.compile(r"^(INFO|WARNING|ERROR):\s+")


def compact_log_line(line: str) -> str:
    """A vLLM log line without its process, date and source prefix (the panel is narrow).

    ``(APIServer pid=7) INFO 11-30 03:16:42 [api_server.py:12] Started`` becomes
    ``INFO Started``.
    """
    line = _VLLM_PREFIX.sub(r"\2 ", line)
    return _UVICORN_PREFIX.sub(r"\1 ", line)


class EngineControl(Protocol):
    """The engine behind the conversation, managed by sparkcode or not."""

    @property
    def managed(self) -> bool:
        """True when sparkcode starts and stops this engine."""

    @property
    def profile_name(self) -> str | None:
        """The profile, or None for a bare endpoint."""

    def status(self) -> EngineStatus:
        """A fresh snapshot of the engine."""

    def start(self, progress: Progress) -> None:
        """Launch the engine (returns once launched; status() shows the boot)."""

    def stop(self) -> None:
        """Stop the engine and every process it started."""

    def pagemath(self, status: EngineStatus) -> str | None:
        """The prefix-cache page math line, if the engine package provides one."""


class ManagedEngine:
    """A profile's vLLM engine, run by :class:`engine.supervisor.Supervisor`."""

    managed = True

    def __init__(self, paths: Paths, profile: Profile) -> None:
        self.paths = paths
        self.profile = profile
        self.supervisor = Supervisor(paths)
        self._pagemath: str | None = None
        self._pagemath_key: str | None = None

    @classmethod
    def for_profile(cls, paths: Paths, name: str) -> ManagedEngine:
        return cls(paths, load_profile(name, paths))

    @property
    def profile_name(self) -> str:
        return self.profile.name

    def status(self) -> EngineStatus:
        status = self.supervisor.status(tail=LOG_TAIL)
        # The supervisor keeps the tail only when something went wrong; the
        # panel shows it always (the boot is worth watching), without the
        # access lines of sparkcode's own polling.
        if status.log_path:
            lines = status.log_tail or tail_lines(Path(status.log_path), 8 * LOG_TAIL)
            kept = [line for line in lines if not _POLL_LINE.search(line)][-LOG_TAIL:]
            status.log_tail = [compact_log_line(line) for line in kept]
        return status

    def start(self, progress: Progress) -> None:
        # The user's Start launches this profile's own engine; the panel shows any
        # engine that runs, and Stop stops it first.
        ensure_running(self.profile, self.paths, reuse=Reuse.NEVER, wait=False, progress=progress)

    def stop(self) -> None:
        self.supervisor.stop()

    def pagemath(self, status: EngineStatus) -> str | None:
        # Worked out again only when the engine's state or phase moves on: it
        # reads config.json and the log.
        key = f"{status.state}/{status.phase}"
        if key != self._pagemath_key:
            log = self.supervisor.log_path()
            lines = tail_lines(log, 400) if log is not None else None
            self._pagemath = pagemath_line(self.profile, self.paths, lines)
            self._pagemath_key = key
        return self._pagemath


class ExternalEndpoint:
    """An OpenAI-compatible server sparkcode does not run; status is a health probe."""

    managed = False
    profile_name = None

    def __init__(self, base_url: str, model: str | None) -> None:
        self.base_url = base_url
        self.model = model

    def status(self) -> EngineStatus:
        root = self.base_url.rstrip("/")
        healthy = False
        with contextlib.suppress(httpx.HTTPError):
            healthy = httpx.get(f"{root}/models", timeout=2.0).status_code < 500
        return EngineStatus(
            state="ready" if healthy else "unhealthy",
            healthy=healthy,
            base_url=self.base_url,
            model=self.model,
        )

    def start(self, progress: Progress) -> None:
        raise RuntimeError("an external endpoint cannot be started from sparkcode")

    def stop(self) -> None:
        raise RuntimeError("an external endpoint cannot be stopped from sparkcode")

    def pagemath(self, status: EngineStatus) -> str | None:
        return None


def engine_control(target: Target, paths: Paths) -> EngineControl:
    """The panel's control of ``target``: its managed engine, or a reached endpoint
    (an endpoint profile is rendered, nothing is started)."""
    if target.managed:
        assert target.profile is not None
        return ManagedEngine(paths, target.profile)
    reached = target.reach(paths)
    return ExternalEndpoint(reached.base_url, reached.model or None)


def pagemath_line(profile: Profile, paths: Paths, log_lines: list[str] | None = None) -> str | None:
    """The profile's prefix-cache page math (``engine.pagemath``) in one line.

    Only hybrid (KDA / Mamba) models have one.
    """
    try:
        math = prefix_cache_math(profile, paths, log_lines)
    except Exception:  # a config.json it cannot read must never break the panel
        return None
    return math.summary() if math is not None else None
