"""git status / diff / log / commit on the workspace repository (gitpython)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core.gitlib import git
from ._base import Preview, Tool, ToolContext, ToolError, ToolOutput, cap_output
from ._confine import resolve_in_workspace


def _repo(workspace: Path) -> git.Repo:
    try:
        return git.Repo(workspace, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise ToolError(f"the workspace {workspace} is not inside a git repository") from None


def _run(repo: git.Repo, *args: str) -> str:
    try:
        return str(repo.git.execute(["git", *args]))
    except git.GitCommandError as exc:
        detail = (exc.stderr or exc.stdout or str(exc)).strip()
        raise ToolError(f"git {args[0]} failed: {detail}") from None


class GitStatus(Tool):
    def __init__(self) -> None:
        super().__init__(
            name="git_status",
            description="Show `git status --short --branch`.",
            parameters={},
            kind="read",
        )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        out = _run(_repo(ctx.workspace), "status", "--short", "--branch")
        return ToolOutput(out or "clean")


class GitDiff(Tool):
    def __init__(self) -> None:
        super().__init__(
            name="git_diff",
            description="Show the working-tree diff (or the staged one), optionally for one path.",
            parameters={"path": {"type": "string"}, "staged": {"type": "boolean"}},
            kind="read",
        )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        cmd = ["diff"]
        if args.get("staged"):
            cmd.append("--cached")
        if args.get("path"):
            cmd += ["--", str(resolve_in_workspace(ctx.workspace, str(args["path"])))]
        out = _run(_repo(ctx.workspace), *cmd)
        return ToolOutput(cap_output(out, ctx.output_cap) if out else "no differences")


class GitLog(Tool):
    def __init__(self) -> None:
        super().__init__(
            name="git_log",
            description="Show recent commits (hash, date, author, subject).",
            parameters={"limit": {"type": "integer", "description": "How many (default 10)."}},
            kind="read",
        )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        try:
            limit = max(1, min(int(args.get("limit") or 10), 200))
        except (TypeError, ValueError):
            raise ToolError("limit must be an integer") from None
        repo = _repo(ctx.workspace)
        if not repo.head.is_valid():
            return ToolOutput("no commits yet")
        out = _run(repo, "log", f"-{limit}", "--format=%h %ad %an: %s", "--date=short")
        return ToolOutput(out)


class GitCommit(Tool):
    def __init__(self) -> None:
        super().__init__(
            name="git_commit",
            description="Commit changes: the given paths, or every change (including new "
            "files) when paths is omitted.",
            parameters={
                "message": {"type": "string", "description": "The commit message."},
                "paths": {"type": "array", "items": {"type": "string"}},
            },
            kind="git",
            required=("message",),
        )

    def _paths(self, args: dict[str, Any], ctx: ToolContext) -> list[str]:
        paths = args.get("paths") or []
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise ToolError("paths must be a list of strings")
        return [str(resolve_in_workspace(ctx.workspace, p)) for p in paths]

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> Preview:
        paths = self._paths(args, ctx)
        what = ", ".join(args.get("paths") or []) or "all changes"
        repo = _repo(ctx.workspace)
        stat = _run(repo, "status", "--short", *(["--", *paths] if paths else []))
        return Preview(
            summary=f"commit {what}: {str(args.get('message', ''))[:80]}",
            detail=f"{args.get('message', '')}\n\n{stat}",
        )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        message = args["message"]
        if not isinstance(message, str) or not message.strip():
            raise ToolError("message must be a non-empty string")
        paths = self._paths(args, ctx)
        repo = _repo(ctx.workspace)
        _run(repo, "add", "-A", "--", *(paths or [str(ctx.workspace.resolve())]))
        if not _run(repo, "diff", "--cached", "--name-only"):
            raise ToolError("nothing to commit: no changes in the given paths")
        _run(repo, "commit", "-q", "-m", message)
        return ToolOutput(_run(repo, "log", "-1", "--format=committed %h: %s", "--stat"))
