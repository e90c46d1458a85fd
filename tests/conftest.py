"""Suite-wide fixtures.

Every test runs with ``SPARKCODE_HOME`` pointing into its own temporary
directory, so nothing reads or writes the developer's real config or data.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.paths import Paths


@pytest.fixture(autouse=True)
def sparkcode_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "sparkcode-home"
    monkeypatch.setenv("SPARKCODE_HOME", str(home))
    yield home


@pytest.fixture
def paths(sparkcode_home: Path) -> Paths:
    return Paths.from_env()


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama with a local tokenizer, built once per test run."""
    from tests.support.tiny_models import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("models") / "tiny-llama")


@pytest.fixture(scope="session")
def tiny_vlm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Idefics3 vision-language model (tests/support/tiny_vlm.py), built once."""
    from tests.support.tiny_vlm import build_tiny_idefics3

    return build_tiny_idefics3(tmp_path_factory.mktemp("models") / "tiny-vlm")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """An empty workspace directory (the TUI tests' own holds a few files)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def repo(workspace: Path) -> Path:
    """A real git repository with one commit."""
    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=workspace, check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    git("config", "user.name", "Test")
    git("config", "user.email", "test@example.com")
    (workspace / "hello.py").write_text("def greet():\n    return 'hi'\n")
    (workspace / ".gitignore").write_text("*.log\n")
    git("add", "-A")
    git("commit", "-q", "-m", "initial")
    return workspace


# -- the order of the suite and its two xdist workers ---------------------------------

E2E = Path(__file__).parent / "e2e"
E2E_LIGHT = ("test_engine_cli.py", "test_vision.py", "test_hybrid.py", "test_capture_vllm.py",
             "test_p12_pool_serving.py", "test_tui.py", "test_replay.py")
"""e2e modules whose engines are tiny and decode little: their own xdist group, queued
after every other test, so the second worker runs them once it has finished the rest;
they take the second engine slot (``tests/support/engine.py``), so at most two engines
run at once, one of them light. ``test_tui.py`` then ``test_replay.py`` share the
session's tiny engine, and ``test_replay.py`` stops it, so it comes last."""
E2E_LAST = ("test_two_nodes.py", "test_agent_task.py", "test_agent_conversation.py")
"""Heavy e2e modules that run last, in this order: they need the trained agent model, so
its background build (``pytest_sessionstart``) has the rest of the suite to finish in."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The modules that boot vLLM go to two xdist groups, so ``-n 2 --dist loadgroup`` runs
    the heavy ones one after another in one worker while the other worker runs everything
    else and then the light ones (``E2E_LIGHT``, in their listed order, after every other
    test); the heavy ones run in collection order but for ``E2E_LAST``."""
    def rank(item: pytest.Item) -> int:
        name = item.path.name
        if name in E2E_LIGHT:
            return 100 + E2E_LIGHT.index(name)
        return E2E_LAST.index(name) + 1 if name in E2E_LAST else 0

    e2e = [item for item in items if item.path.parent == E2E]
    for item in e2e:
        light = item.path.name in E2E_LIGHT
        item.add_marker(pytest.mark.xdist_group("e2e-light" if light else "e2e"))
    ordered = sorted(e2e, key=rank)
    heavy = iter([item for item in ordered if item.path.name not in E2E_LIGHT])
    rest = [next(heavy) if item.path.parent == E2E else item for item in items
            if item.path.name not in E2E_LIGHT or item.path.parent != E2E]
    items[:] = rest + [item for item in ordered if item.path.name in E2E_LIGHT]


_AGENT_MODEL_USERS = tuple(E2E / name for name in ("test_agent_task.py",
                                                   "test_agent_conversation.py"))


def _selects_agent_model_users(config: pytest.Config) -> bool:
    """The command line asks for a module that needs the trained agent model."""
    if "not engine" in (config.option.markexpr or ""):
        return False
    args = config.args or [str(config.rootpath / "tests")]
    for arg in args:
        path = (config.invocation_params.dir / arg.split("::")[0]).resolve()
        if any(user == path or path in user.parents for user in _AGENT_MODEL_USERS):
            return True
    return False


def pytest_sessionstart(session: pytest.Session) -> None:
    """Train the e2e agent model in the background from the start of the session (it
    takes about a minute of CPU: tests/support/agent_model.py), one torch thread, into
    the pytest cache the e2e fixtures read; they wait on its lock if it is still going.
    Only in the controlling process (not in an xdist worker), and only when the run
    includes a module that needs it."""
    config = session.config
    cache = getattr(config, "cache", None)
    if hasattr(config, "workerinput") or cache is None or not _selects_agent_model_users(config):
        return
    root = Path(cache.mkdir("sparkcode-agent-model"))
    log = (root / "background-build.log").open("w")
    env = {**os.environ, "PYTHONPATH": str(config.rootpath)}
    config.stash[_BUILDER] = subprocess.Popen(
        [sys.executable, "-m", "tests.support.agent_model", str(root)],
        cwd=config.rootpath, env=env, stdout=log, stderr=subprocess.STDOUT)
    log.close()


def pytest_sessionfinish(session: pytest.Session) -> None:
    builder = session.config.stash.get(_BUILDER, None)
    if builder is not None and builder.poll() is None:
        builder.terminate()
        builder.wait(10)


_BUILDER = pytest.StashKey["subprocess.Popen[bytes]"]()
