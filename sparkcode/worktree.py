"""Worktree sessions (``sparkcode --worktree [NAME]``, ``sparkcode run --worktree [NAME]``).

A session started with ``--worktree`` works in a git worktree of its own, on the branch
``sparkcode/NAME``, so several sessions can change one repository at once (each talks
to the same engine as any session does) without touching each other's files or the
tree the user is in. On the way out the front prints :meth:`Worktree.exit_advice`: the
exact commands that merge the branch or remove the worktree.

Where a worktree lives: ``<git common dir>/sparkcode/worktrees/NAME`` (for a plain
clone ``<repo>/.git/sparkcode/worktrees/NAME``). Inside the git directory because it is
never part of the tracked tree (no ``.gitignore`` line is needed and ``git status`` of
the main tree stays clean), the agent's file walks skip ``.git`` so a session in the
main tree does not see its siblings' copies, it is writable wherever the repository
is (a sibling directory beside the repository may not be), and it belongs to the one
repository (a second clone has its own). The path is printed at start and at exit.

A worktree starts from HEAD of the tree the session was started in: uncommitted
changes there are not in it (the start says so). ``--worktree NAME`` again reopens the
sparkcode worktree NAME as it was left; any other branch or path of that name is
refused with what to do. A session recorded in a worktree resumes there
(:func:`sparkcode.start.find_resume`), and a removed worktree is named as such.
"""

from __future__ import annotations

import datetime as dt
import re
import secrets
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import UserError

BRANCH_PREFIX = "sparkcode/"
WORKTREES_DIR = ("sparkcode", "worktrees")
"""Under the repository's git common directory."""
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True)
class Worktree:
    """A sparkcode worktree, as a session works in it."""

    repo: Path
    """The repository's main working tree (where the branch is merged)."""
    path: Path
    """The worktree's top directory."""
    branch: str
    """``sparkcode/NAME``."""
    base: str
    """The commit it started from (for a reopened one: its HEAD when reopened)."""
    workspace: Path
    """Where the session works: :attr:`path`, or the same subdirectory of it the
    session was started in."""
    created: bool = False
    """This start made it (False: reopened or found)."""
    notes: tuple[str, ...] = field(default=())
    """What the start tells the user (shown once, as the builder's notes are)."""

    @property
    def name(self) -> str:
        return self.branch.removeprefix(BRANCH_PREFIX)

    def to_json(self) -> dict[str, str]:
        """The session header's ``worktree`` record."""
        return {
            "path": str(self.path),
            "branch": self.branch,
            "repo": str(self.repo),
            "base": self.base,
        }

    def discard(self) -> None:
        """Remove a worktree this start made and nothing used (the session did not
        start): its directory and branch, so a failed start leaves nothing behind."""
        if self.created:
            _git(self.repo, "worktree", "remove", "--force", str(self.path))
            _git(self.repo, "branch", "-D", self.branch)

    def exit_advice(self) -> str:
        """What to do with the worktree now: the exact git commands, quoted for a shell."""
        repo, path, branch = (shlex.quote(str(p)) for p in (self.repo, self.path, self.branch))
        if not self.path.is_dir():
            return f"sparkcode: the worktree {self.path} is gone (branch {self.branch})"
        dirty = _git(self.path, "status", "--porcelain").stdout.strip() != ""
        ahead = _git(self.repo, "rev-list", "--count", f"HEAD..{self.branch}").stdout.strip()
        lines = [
            f"sparkcode: this session worked in the worktree {self.path} "
            f"(branch {self.branch}: {ahead or '?'} commits not in {self.repo}'s HEAD"
            f"{', and uncommitted changes' if dirty else ''})"
        ]
        if dirty:
            lines.append(
                f"  commit its changes: git -C {path} add -A && "
                f"git -C {path} commit -m 'sparkcode session'"
            )
        lines.append(f"  merge it:    git -C {repo} merge {branch}")
        force = " --force" if dirty else ""
        lines.append(
            f"  remove it:   git -C {repo} worktree remove{force} {path} && "
            f"git -C {repo} branch -D {branch}"
            + ("  (--force discards its uncommitted changes)" if dirty else "")
        )
        lines.append(f"  continue it: sparkcode --worktree {shlex.quote(self.name)} (in {repo})")
        return "\n".join(lines)


def default_name() -> str:
    """A new worktree's name when none is given: the UTC time and four hex digits."""
    return f"{dt.datetime.now(dt.UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def open_worktree(directory: Path, name: str | None = None) -> Worktree:
    """The worktree ``name`` of the repository holding ``directory``: made from HEAD
    (branch ``sparkcode/NAME``), or reopened when it is already a sparkcode worktree.

    Raises :class:`UserError` naming the problem: not a repository, no commit yet, a
    bad name, a branch or path of that name that is not this sparkcode worktree."""
    directory = directory.expanduser().resolve()
    if not directory.is_dir():
        raise UserError(f"workspace {directory} is not a directory")
    top, common, prefix = _repository(directory)
    name = default_name() if name is None else name.strip()
    _check_name(directory, name)
    branch = BRANCH_PREFIX + name
    path = common.joinpath(*WORKTREES_DIR, name)
    listed = _worktrees(top)
    main = listed[0][0] if listed else top
    for where, ref, prunable in listed:
        if where == path:
            if prunable:
                raise UserError(
                    f"--worktree {name}: {path} was deleted but git still lists it "
                    f"as a worktree; run `git -C {shlex.quote(str(main))} worktree "
                    "prune` and start again"
                )
            if ref != "refs/heads/" + branch:
                raise UserError(
                    f"--worktree {name}: {path} is a worktree on "
                    f"{_ref_name(ref)}, not on {branch}; pick another name"
                )
            head = _git(path, "rev-parse", "HEAD").stdout.strip()
            return Worktree(
                main,
                path,
                branch,
                head,
                _inside(path, prefix),
                notes=(
                    f"reopened the worktree {path} (branch {branch}) as the last session left it",
                ),
            )
        if ref == "refs/heads/" + branch:
            raise UserError(
                f"--worktree {name}: branch {branch} is checked out in {where}; pick another name"
            )
    if path.exists():
        raise UserError(
            f"--worktree {name}: {path} exists and is not a worktree of "
            f"{main}; remove it or pick another name"
        )
    if _git(top, "rev-parse", "--verify", "--quiet", "refs/heads/" + branch).returncode == 0:
        raise UserError(
            f"--worktree {name}: branch {branch} exists but no worktree has it checked out; "
            f"pick another name, delete it (git -C {shlex.quote(str(main))} branch -D "
            f"{branch}) or check it out in its worktree again (git -C "
            f"{shlex.quote(str(main))} worktree add {shlex.quote(str(path))} {branch})"
        )
    found = _git(top, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    if found.returncode != 0:
        raise UserError(
            f"--worktree: {top} has no commit yet, and a worktree starts from "
            "HEAD; commit something first"
        )
    base = found.stdout.strip()
    added = _git(top, "worktree", "add", "--quiet", "-b", branch, str(path), base)
    if added.returncode != 0:
        raise UserError(
            f"--worktree {name}: git worktree add failed: "
            f"{added.stderr.strip() or added.stdout.strip()}"
        )
    notes = [
        f"this session works in the new worktree {path} (branch {branch}, from "
        f"{_describe(top, base)})"
    ]
    changes = [line for line in _git(top, "status", "--porcelain").stdout.splitlines() if line]
    if changes:
        notes.append(
            f"the worktree starts from HEAD: the {len(changes)} uncommitted "
            f"change{'s' if len(changes) != 1 else ''} in {top} "
            f"{'are' if len(changes) != 1 else 'is'} not in it"
        )
    workspace = _inside(path, prefix)
    if workspace == path and prefix:
        notes.append(f"{prefix} is not in HEAD, so the session works at the worktree's top")
    return Worktree(main, path, branch, base, workspace, created=True, notes=tuple(notes))


def find_worktree(workspace: Path) -> Worktree | None:
    """The sparkcode worktree ``workspace`` is in, or None (never raises).

    Only a path under a repository's ``sparkcode/worktrees/`` is asked of git, so an
    ordinary session's start costs nothing."""
    workspace = workspace.expanduser().resolve()
    parts = workspace.parts
    if not any(parts[i : i + 2] == WORKTREES_DIR for i in range(len(parts) - 1)):
        return None
    try:
        top, common, prefix = _repository(workspace)
    except (UserError, OSError):
        return None
    name = top.name
    if top != common.joinpath(*WORKTREES_DIR, name):
        return None
    listed = _worktrees(top)
    for where, ref, _ in listed:
        if where == top and ref == f"refs/heads/{BRANCH_PREFIX}{name}":
            head = _git(top, "rev-parse", "HEAD").stdout.strip()
            return Worktree(
                listed[0][0],
                top,
                BRANCH_PREFIX + name,
                head,
                workspace,
                notes=(f"this session works in the worktree {top} (branch {BRANCH_PREFIX}{name})",),
            )
    return None


def recorded_worktree(header: dict[str, Any]) -> tuple[Path, str] | None:
    """A session header's worktree (path, branch), if it was recorded in one."""
    record = header.get("worktree")
    if not isinstance(record, dict):
        return None
    path, branch = record.get("path"), record.get("branch")
    if not isinstance(path, str) or not isinstance(branch, str):
        return None
    return Path(path), branch


def same_repository(a: Path, b: Path) -> bool:
    """Whether two directories are in the same repository (any of its worktrees)."""
    try:
        return _repository(a)[1] == _repository(b)[1]
    except (UserError, OSError):
        return False


def _check_name(directory: Path, name: str) -> None:
    if not _NAME.fullmatch(name):
        raise UserError(
            f"--worktree {name!r}: a worktree name is letters, digits, '.', '_' "
            "and '-', starting with a letter or digit"
        )
    checked = _git(directory, "check-ref-format", f"refs/heads/{BRANCH_PREFIX}{name}")
    if checked.returncode != 0:
        raise UserError(
            f"--worktree {name!r}: git refuses {BRANCH_PREFIX}{name} as a branch "
            "name (no '..', no ending in '.lock' or '.'); pick another name"
        )


def _repository(directory: Path) -> tuple[Path, Path, str]:
    """The working tree's top, the git common directory and the path of ``directory``
    below the top (``""`` or ``sub/dir/``)."""
    found = _git(directory, "rev-parse", "--show-toplevel", "--git-common-dir", "--show-prefix")
    lines = found.stdout.splitlines()
    if found.returncode != 0 or len(lines) < 2:
        why = found.stderr.strip().splitlines()
        raise UserError(
            f"--worktree needs a git repository, and {directory} is not in the "
            f"working tree of one ({why[-1] if why else 'git found none'}); run "
            "it in a repository or pass --workspace one"
        )
    top = Path(lines[0]).resolve()
    common = Path(lines[1])
    common = (common if common.is_absolute() else directory / common).resolve()
    return top, common, lines[2] if len(lines) > 2 else ""


def _worktrees(top: Path) -> list[tuple[Path, str, bool]]:
    """``git worktree list``: each worktree's path, checked-out ref (``""``: detached or
    bare) and whether git calls it prunable (its directory is gone); the main first."""
    out: list[tuple[Path, str, bool]] = []
    for block in _git(top, "worktree", "list", "--porcelain").stdout.split("\n\n"):
        fields = dict((line.split(" ", 1) + [""])[:2] for line in block.splitlines() if line)
        if "worktree" in fields:
            out.append(
                (Path(fields["worktree"]).resolve(), fields.get("branch", ""), "prunable" in fields)
            )
    return out


def _inside(path: Path, prefix: str) -> Path:
    """The start's subdirectory in the worktree, where it exists there."""
    sub = path / prefix if prefix else path
    return sub.resolve() if sub.is_dir() else path


def _describe(top: Path, commit: str) -> str:
    branch = _git(top, "symbolic-ref", "--quiet", "--short", "HEAD").stdout.strip()
    return f"{commit[:12]}{f' on {branch}' if branch else ''}"


def _ref_name(ref: str) -> str:
    return ref.removeprefix("refs/heads/") or "a detached HEAD"


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(["git", *args], 128, "", str(exc))


__all__ = [
    "BRANCH_PREFIX",
    "Worktree",
    "default_name",
    "find_worktree",
    "open_worktree",
    "recorded_worktree",
    "same_repository",
]
