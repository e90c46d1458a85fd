"""Engines shared across the e2e modules, and the order those modules run in.

A boot of even the tiniest model costs about 22 s on two cores (three Python processes
each importing vLLM, measured from the engine logs), so a profile that several modules
only *talk to* is started once per session here; a module that starts, stops or crashes
an engine on purpose boots its own.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.paths import Paths
from engine.profiles import load_profile
from engine.supervisor import Supervisor, running
from tests.support.engine import RunningEngine, engine_lock, free_port
from tests.support.tiny_models import write_profile


def paths_of(home: Path) -> Paths:
    """The directories of the SPARKCODE_HOME ``home`` (as ``Paths.from_env`` would)."""
    return Paths(home / "config", home / "data", home / "state")


@pytest.fixture(scope="session")
def tiny_engine(
    tmp_path_factory: pytest.TempPathFactory, tiny_llama_dir: Path
) -> Iterator[RunningEngine]:
    """The tiny random Llama as the managed ``tiny`` engine of its own SPARKCODE_HOME,
    started once for the session (``test_tui.py``, ``test_replay.py``).

    The home also holds ``tiny-nopc``, the same model without prefix caching. A test may
    stop the engine (``test_replay.py`` last reruns against both profiles, which starts
    each itself): the order hook in ``tests/conftest.py`` runs that module after the
    other users.
    """
    home = tmp_path_factory.mktemp("tiny-home")
    write_profile(home / "config", "tiny", tiny_llama_dir, free_port())
    off = write_profile(home / "config", "tiny-nopc", tiny_llama_dir, free_port())
    off.write_text(
        off.read_text()
        .replace('name = "tiny"', 'name = "tiny-nopc"')
        .replace("enforce_eager = true", "enforce_eager = true\nenable_prefix_caching = false")
    )
    paths = paths_of(home)
    with contextlib.ExitStack() as stack:
        stack.enter_context(engine_lock())
        before = os.environ.get("SPARKCODE_HOME")
        os.environ["SPARKCODE_HOME"] = str(home)  # what the engine process inherits
        try:
            handle = stack.enter_context(running(load_profile("tiny", paths), paths, timeout=600))
        finally:
            if before is None:
                os.environ.pop("SPARKCODE_HOME", None)
            else:
                os.environ["SPARKCODE_HOME"] = before
        yield RunningEngine(paths, Supervisor(paths), handle.status, "tiny")


@pytest.fixture(scope="session")
def agent_model_dir(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The tiny Llama trained to do one agent task (``tests/support/agent_model.py``),
    from the pytest cache: built in the background since the session started
    (``tests/conftest.py``), or here if that build is not running."""
    from tests.support.agent_model import cached_agent_model

    cache = getattr(request.config, "cache", None)
    root = (
        Path(cache.mkdir("sparkcode-agent-model"))
        if cache is not None
        else tmp_path_factory.mktemp("agent-model")
    )
    with engine_lock():  # trained (if here) with no test engine competing for the cores
        return cached_agent_model(root)


@pytest.fixture(autouse=True, scope="module")
def _engine_slot(request: pytest.FixtureRequest) -> Iterator[None]:
    """A module of the second engine lane (``E2E_SECOND_LANE`` in tests/conftest.py)
    takes the second engine slot."""
    from tests import conftest
    from tests.support import engine

    before = engine.lock_slot
    engine.lock_slot = "lane2" if request.path.name in conftest.E2E_SECOND_LANE else ""
    try:
        yield
    finally:
        engine.lock_slot = before
