"""A ``sparkcode run --json`` turn in a real git repository, for the e2e modules."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path
from typing import Any

from sparkcode.cli._run import RunRequest, run_headless


def make_repo(path: Path) -> Path:
    """A git repository at ``path`` with one commit (a README)."""
    path.mkdir(parents=True)
    for args in (
        ["init", "-q", "-b", "main"],
        ["config", "user.name", "T"],
        ["config", "user.email", "t@example.com"],
    ):
        subprocess.run(["git", *args], cwd=path, check=True)
    (path / "README.md").write_text("# demo\n")
    subprocess.run(["git", "add", "-A"], cwd=path, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "initial"], cwd=path, check=True)
    return path


async def run(options: RunRequest) -> tuple[int, list[dict[str, Any]], str]:
    """The exit code, the JSON events and the stderr of one headless run."""
    out, err = io.StringIO(), io.StringIO()
    code = await run_headless(options, out=out, err=err)
    return code, [json.loads(line) for line in out.getvalue().splitlines()], err.getvalue()


def of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The events of one type."""
    return [e for e in events if e["type"] == kind]
