"""Workspace confinement: every path a tool touches must resolve inside it."""

from __future__ import annotations

from pathlib import Path

from ._base import ToolError


def resolve_in_workspace(workspace: Path, path: str, *, for_write: bool = False) -> Path:
    """The absolute path for ``path`` (relative to the workspace), or a
    :class:`ToolError` if it resolves outside: ``..``, an absolute path
    elsewhere, or a symlink (at any level) pointing out."""
    if not isinstance(path, str) or not path.strip():
        raise ToolError("the path is empty; give a path relative to the workspace root")
    if "\x00" in path:
        raise ToolError("the path contains a NUL byte")
    root = workspace.resolve()
    candidate = Path(path).expanduser() if path.startswith("~") else Path(path)
    if not candidate.is_absolute():
        candidate = root / candidate
    try:
        # resolve() follows every existing symlink, so a link pointing out is caught.
        resolved = candidate.resolve()
    except (OSError, RuntimeError) as exc:  # symlink loop
        raise ToolError(f"cannot resolve {path!r}: {exc}") from None
    if resolved != root and not resolved.is_relative_to(root):
        raise ToolError(
            f"{path!r} resolves to {resolved}, outside the workspace {root}; "
            "only paths inside the workspace are allowed (use a relative path)"
        )
    if for_write:
        rel = resolved.relative_to(root)
        if rel.parts and rel.parts[0] == ".git":
            raise ToolError(f"{path!r} is inside .git; edit files in the working tree instead")
    return resolved


def display(workspace: Path, path: Path) -> str:
    """``path`` relative to the workspace, for messages."""
    try:
        rel = path.relative_to(workspace.resolve())
    except ValueError:
        return str(path)
    return str(rel) if rel.parts else "."
