"""``/init``: draft an ``AGENTS.md`` from what the repository shows, for the user to approve.

The draft is built from files, not by the model, so it is quick, the same
every time, and says only what is there: the README's first paragraph, the
build and test commands the project files declare (``Makefile`` targets,
``pyproject.toml``, ``package.json`` scripts, ``Cargo.toml``, ``go.mod``) and
the top-level layout. The user reads it before it is written.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

_SKIP = {
    ".git",
    ".venv",
    "venv",
    "node_modules",
    "__pycache__",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    "dist",
    "build",
    "target",
}
_MAKE_TARGET = re.compile(r"^([A-Za-z][\w.-]*)\s*:(?!=)", re.MULTILINE)
_USEFUL_TARGETS = (
    "install",
    "setup",
    "build",
    "run",
    "test",
    "check",
    "lint",
    "typecheck",
    "format",
    "fmt",
)


def draft_agents_md(workspace: Path) -> str:
    """The text of a draft ``AGENTS.md`` for ``workspace``."""
    lines = [f"# {workspace.name}", ""]
    about = _readme_paragraph(workspace)
    if about:
        lines += [about, ""]
    commands = _commands(workspace)
    if commands:
        lines += ["## Commands", ""]
        lines += [f"- `{cmd}`: {why}" for cmd, why in commands]
        lines.append("")
    layout = _layout(workspace)
    if layout:
        lines += ["## Layout", ""] + layout + [""]
    lines += [
        "## Conventions",
        "",
        "- Keep changes small and run the tests before saying a change is done.",
        "- (Add the project's own rules here: style, naming, what not to touch.)",
        "",
    ]
    return "\n".join(lines)


def _readme_paragraph(workspace: Path) -> str:
    for name in ("README.md", "README.rst", "README.txt", "README"):
        path = workspace / name
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8", errors="replace")[:20_000]
        except OSError:
            return ""
        for block in re.split(r"\n\s*\n", text):
            block = block.strip()
            if block and not block.startswith(("#", "=", "[!", "<", "```", "|")):
                return " ".join(block.split())[:600]
    return ""


def _commands(workspace: Path) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    makefile = workspace / "Makefile"
    if makefile.is_file():
        targets = set(_MAKE_TARGET.findall(makefile.read_text(errors="replace")))
        out += [(f"make {t}", "Makefile target") for t in _USEFUL_TARGETS if t in targets]
    pyproject = workspace / "pyproject.toml"
    if pyproject.is_file():
        try:
            doc = tomllib.loads(pyproject.read_text(errors="replace"))
        except tomllib.TOMLDecodeError:
            doc = {}
        tool = doc.get("tool", {}) if isinstance(doc.get("tool"), dict) else {}
        if "pytest" in tool or (workspace / "tests").is_dir():
            out.append(("python -m pytest", "run the tests"))
        if "ruff" in tool:
            out.append(("ruff check .", "lint"))
        if "mypy" in tool:
            out.append(("mypy", "type-check"))
    package = workspace / "package.json"
    if package.is_file():
        try:
            scripts = json.loads(package.read_text(errors="replace")).get("scripts", {})
        except (ValueError, AttributeError):
            scripts = {}
        if isinstance(scripts, dict):
            out += [
                (f"npm run {name}", "package.json script")
                for name in scripts
                if name in ("build", "test", "lint", "dev", "start", "typecheck")
            ]
    if (workspace / "Cargo.toml").is_file():
        out += [("cargo build", "build"), ("cargo test", "run the tests")]
    if (workspace / "go.mod").is_file():
        out += [("go build ./...", "build"), ("go test ./...", "run the tests")]
    return out


def _layout(workspace: Path) -> list[str]:
    try:
        entries = sorted(workspace.iterdir(), key=lambda p: (not p.is_dir(), p.name))
    except OSError:
        return []
    shown = [p for p in entries if p.name not in _SKIP and not p.name.startswith(".")]
    return [f"- `{p.name}{'/' if p.is_dir() else ''}`" for p in shown[:30]]


__all__ = ["draft_agents_md"]
