from __future__ import annotations

import subprocess
from pathlib import Path

import pytest


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
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
