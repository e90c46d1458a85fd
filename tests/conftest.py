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
E2E_FIRST = ("test_cpu_demo.py", "test_qwen_coder.py")
"""First-lane modules that run first: they decode the most, so they run while the other
worker runs the unit tests (mostly one thread) rather than beside a second engine. Two
engines decoding at once on two cores slow each other several times over (OpenMP threads
spin for their cores): cpu-demo's module took 739 s beside the second lane, 261 s beside
the unit tests, 178 s alone."""
E2E_LAST = ("test_two_nodes.py", "test_agent_task.py", "test_agent_conversation.py")
"""First-lane modules that run last, in this order: they need the trained agent model, so
its background build (``pytest_sessionstart``) has the rest of the suite to finish in."""
E2E_SECOND_LANE = (
    "test_engine_cli.py",
    "test_vision.py",
    "test_hybrid.py",
    "test_capture_vllm.py",
    "test_tui.py",
    "test_run_worktree.py",
    "test_replay.py",
    "test_w8a8_serving.py",
)
"""The second engine lane: tiny engines that decode little, queued after every other test
(``make test`` passes ``--no-loadscope-reorder``, so xdist hands work out in this order),
so the worker that finishes the unit tests runs them beside the first lane's later modules.
``test_tui.py``, ``test_run_worktree.py`` then ``test_replay.py`` share the session's
tiny engine and
``test_replay.py`` stops it. Each lane has its own slot of ``tests/support/engine.py``'s
engine lock: at most two engines run at once."""


def lane(item: pytest.Item) -> str | None:
    """The engine lane of a test (its xdist group), None outside tests/e2e/."""
    if item.path.parent != E2E:
        return None
    return "e2e-2" if item.path.name in E2E_SECOND_LANE else "e2e-1"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The modules that boot vLLM go to two xdist groups: with ``-n 2 --dist loadgroup
    --no-loadscope-reorder`` one worker runs the first lane from the start, one module
    after another, while the other runs everything else and then the second lane."""

    def rank(item: pytest.Item) -> tuple[int, int]:
        name = item.path.name
        if name in E2E_FIRST:
            return (0, E2E_FIRST.index(name))
        if name in E2E_LAST:
            return (2, E2E_LAST.index(name))
        return (1, 0)

    first = sorted((item for item in items if lane(item) == "e2e-1"), key=rank)
    second = sorted(
        (item for item in items if lane(item) == "e2e-2"),
        key=lambda item: E2E_SECOND_LANE.index(item.path.name),
    )
    for item in first:
        item.add_marker(pytest.mark.xdist_group("e2e-1"))
    for item in second:
        item.add_marker(pytest.mark.xdist_group("e2e-2"))
    rest = [item for item in items if lane(item) is None]
    items[:] = first + rest + second


_AGENT_MODEL_USERS = tuple(
    E2E / name for name in ("test_two_nodes.py", "test_agent_task.py", "test_agent_conversation.py")
)


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


SUITE_FREE_BYTES = 2 << 30
"""Free space the suite asks for where it writes. A clean-clone run on 2 cores peaked at
0.3 GiB under pytest's temporary folder (sampled every 20 s, 2026-12-07); the rest is
room for engine logs, compile caches and the trained agent model in ``.pytest_cache``."""


def _check_disk(config: pytest.Config) -> None:
    """Stop at once, naming the folder, when a disk the suite writes to is nearly full:
    otherwise every engine fixture errors at setup with a library's traceback."""
    import shutil
    import tempfile

    for where in dict.fromkeys([Path(tempfile.gettempdir()), Path(config.rootpath)]):
        free = shutil.disk_usage(where).free
        if free < SUITE_FREE_BYTES:
            pytest.exit(
                f"not enough disk space for the test suite in {where}: "
                f"{free / (1 << 30):.1f} GiB free, it needs about "
                f"{SUITE_FREE_BYTES / (1 << 30):.0f} GiB; free some space there "
                "(or point TMPDIR at a larger disk)",
                returncode=3,
            )


def pytest_sessionstart(session: pytest.Session) -> None:
    """Train the e2e agent model in the background from the start of the session (it
    takes about a minute of CPU: tests/support/agent_model.py), one torch thread, into
    the pytest cache the e2e fixtures read; they wait on its lock if it is still going.
    Only in the controlling process (not in an xdist worker), and only when the run
    includes a module that needs it."""
    config = session.config
    if not hasattr(config, "workerinput"):
        _check_disk(config)
    cache = getattr(config, "cache", None)
    if hasattr(config, "workerinput") or cache is None or not _selects_agent_model_users(config):
        return
    root = Path(cache.mkdir("sparkcode-agent-model"))
    log = (root / "background-build.log").open("w")
    # Torch's default two threads (the trained weights depend on the summation order),
    # but waiting passively: spinning OpenMP threads burnt 8 min of CPU against both
    # engine lanes in one CI run, for a build that takes 64 s on quiet cores. The wait
    # policy changes no arithmetic.
    env = {**os.environ, "PYTHONPATH": str(config.rootpath), "OMP_WAIT_POLICY": "PASSIVE"}
    config.stash[_BUILDER] = subprocess.Popen(
        [sys.executable, "-m", "tests.support.agent_model", str(root)],
        cwd=config.rootpath,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()


def pytest_sessionfinish(session: pytest.Session) -> None:
    builder = session.config.stash.get(_BUILDER, None)
    if builder is not None and builder.poll() is None:
        builder.terminate()
        builder.wait(10)


_BUILDER = pytest.StashKey["subprocess.Popen[bytes]"]()
