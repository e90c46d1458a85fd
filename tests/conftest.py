"""Suite-wide fixtures.

Every test runs with ``SPARKCODE_HOME`` pointing into its own temporary
directory, so nothing reads or writes the developer's real config or data.
"""

from __future__ import annotations

import subprocess
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
