"""Undo snapshots in a separate git directory.

Each snapshot is a commit of the whole workspace (``.gitignore`` respected) in
``<data>/undo/<workspace-hash>`` with ``GIT_DIR`` / ``GIT_WORK_TREE`` / a private
index pointing there, so the user's repository, index, branches and stash are
never touched. Snapshots form a stack (``refs/sparkcode/stack``); :meth:`undo`
restores the newest one and pops it. :meth:`capture`, :meth:`restore`,
:meth:`push` and :meth:`drop` are the pieces the agent's turn-level undo and
redo are made of (a capture of the workspace after a turn is what redo restores).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from engine.errors import UserError

from .gitlib import git


class UndoError(UserError):
    """Nothing to undo, or the snapshot store is broken."""


_STACK = "refs/sparkcode/stack"


class UndoStore:
    def __init__(self, workspace: Path, data_dir: Path) -> None:
        self.workspace = workspace.resolve()
        digest = hashlib.sha256(str(self.workspace).encode()).hexdigest()[:16]
        self.git_dir = data_dir / "undo" / digest
        self._git: git.Git | None = None

    def _g(self) -> git.Git:
        if self._git is None:
            fresh = not (self.git_dir / "HEAD").exists()
            self.git_dir.mkdir(parents=True, exist_ok=True)
            g = git.Git(str(self.workspace))
            g.update_environment(
                GIT_DIR=str(self.git_dir),
                GIT_WORK_TREE=str(self.workspace),
                GIT_INDEX_FILE=str(self.git_dir / "index"),
                GIT_AUTHOR_NAME="sparkcode",
                GIT_AUTHOR_EMAIL="sparkcode@localhost",
                GIT_COMMITTER_NAME="sparkcode",
                GIT_COMMITTER_EMAIL="sparkcode@localhost",
            )
            if fresh:
                try:
                    g.execute(["git", "init", "-q"])
                    g.execute(["git", "config", "core.autocrlf", "false"])
                except git.GitCommandError as exc:
                    raise UndoError(
                        f"cannot create the undo store {self.git_dir}: "
                        f"{(exc.stderr or str(exc)).strip()}"
                    ) from None
                (self.git_dir / "info").mkdir(exist_ok=True)
                # The user's own repository is not part of a snapshot.
                (self.git_dir / "info" / "exclude").write_text(".git\n")
            self._git = g
        return self._git

    def _run(self, *args: str) -> str:
        try:
            return str(self._g().execute(["git", *args]))
        except git.GitCommandError as exc:
            raise UndoError(
                f"undo store {self.git_dir}: git {args[0]} failed: "
                f"{(exc.stderr or str(exc)).strip()}"
            ) from None

    def _tree_now(self) -> str:
        self._run("add", "-A", "--", ".")
        return self._run("write-tree")

    def snapshot(self, label: str = "") -> str:
        """Record the workspace as it is now; returns the snapshot id."""
        tree = self._tree_now()
        parent = self._head()
        args = ["commit-tree", tree, "-m", label or "snapshot"]
        if parent:
            args += ["-p", parent]
        commit = self._run(*args)
        self._run("update-ref", _STACK, commit)
        return commit

    def _head(self) -> str | None:
        try:
            return str(self._g().execute(["git", "rev-parse", "-q", "--verify", _STACK]))
        except git.GitCommandError:
            return None

    def snapshots(self) -> list[str]:
        head = self._head()
        return self._run("rev-list", head).split() if head else []

    def undo(self) -> tuple[str, list[str]]:
        """Restore the newest snapshot (and pop it); returns it and the changed paths."""
        head = self._head()
        if head is None:
            raise UndoError("nothing to undo: no snapshot was taken in this workspace")
        paths = self.restore(head)
        self.drop(head)
        return head, paths

    def capture(self, label: str) -> str:
        """A commit of the workspace as it is now, not put on the stack."""
        return self._run("commit-tree", self._tree_now(), "-m", label)

    def push(self, commit: str) -> None:
        """Put a snapshot back on top of the stack (redo of an undone turn)."""
        self._run("update-ref", _STACK, commit)

    def drop(self, commit: str) -> None:
        """Take ``commit`` off the top of the stack, if it is there."""
        if self._head() != commit:
            return
        parent = self._run("rev-list", "--parents", "-n", "1", commit).split()[1:]
        if parent:
            self._run("update-ref", _STACK, parent[0])
        else:
            self._run("update-ref", "-d", _STACK)

    def restore(self, commit: str) -> list[str]:
        """Make the workspace match ``commit``; returns the paths that changed."""
        try:
            target_tree = self._run("rev-parse", f"{commit}^{{tree}}")
        except UndoError:
            raise UndoError(
                f"snapshot {commit[:12]} is not in the undo store {self.git_dir}"
            ) from None
        now_tree = self._tree_now()
        changed = self._run("diff", "--name-status", "--no-renames", target_tree, now_tree)
        paths: list[str] = []
        for line in changed.splitlines():
            status, _, path = line.partition("\t")
            paths.append(path)
            if status == "A":  # created after the snapshot
                (self.workspace / path).unlink(missing_ok=True)
                _prune_empty_dirs(self.workspace, (self.workspace / path).parent)
        self._run("read-tree", target_tree)
        self._run("checkout-index", "-a", "-f")
        return paths


def _prune_empty_dirs(root: Path, directory: Path) -> None:
    while directory != root and directory.is_relative_to(root):
        try:
            os.rmdir(directory)
        except OSError:
            return
        directory = directory.parent
