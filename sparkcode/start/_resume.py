"""Which recorded session to continue, resume or fork, checked before anything starts.

The fronts (``sparkcode --continue`` / ``--resume``, ``sparkcode run --resume``,
``sparkcode sessions fork``, the TUI's ``/sessions``) find the session here and
get a :class:`~sparkcode.replay.Rebuilt` conversation to hand to the session
builder (:class:`sparkcode.start.SessionOptions` ``resume``). A session from
another workspace is refused with :class:`WorkspaceMismatch`, which names both
directories, so the front can ask the user before switching.
"""

from __future__ import annotations

import os
from pathlib import Path

from engine.errors import UserError
from engine.paths import Paths

from ..replay import Rebuilt, rebuild_conversation
from ..sessions import SessionRecorder, SessionStore, SessionSummary
from ..worktree import recorded_worktree, same_repository


class WorkspaceMismatch(UserError):
    """The session was recorded in another workspace than the one asked for."""

    def __init__(self, session_id: str, recorded: Path, current: Path) -> None:
        super().__init__(
            f"session {session_id} was recorded in {recorded}, not in {current}; "
            f"to resume it there, pass --workspace {recorded}"
        )
        self.session_id = session_id
        self.recorded = recorded
        self.current = current


def latest_session(store: SessionStore, workspace: Path) -> SessionSummary | None:
    """The newest session recorded in ``workspace`` that sent something (or a fork)."""
    mine = [
        s
        for s in store.summaries()
        if Path(s.workspace) == workspace and (s.requests > 0 or s.origin == "fork")
    ]
    if not mine:
        return None
    return max(mine, key=lambda s: (s.created, _mtime(s.path)))


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


async def find_resume(
    store: SessionStore,
    workspace: Path,
    *,
    session_id: str | None = None,
    latest: bool = False,
    turn: int | None = None,
    any_workspace: bool = False,
) -> Rebuilt:
    """The conversation to resume: ``session_id`` (a unique prefix) or the latest of
    ``workspace``; raises :class:`WorkspaceMismatch` unless ``any_workspace``."""
    workspace = workspace.expanduser().resolve()
    if latest:
        summary = latest_session(store, workspace)
        if summary is None:
            raise UserError(
                f"no recorded session of {workspace} to continue (see `sparkcode "
                "sessions list`; `sparkcode --resume ID` takes any session)"
            )
        session_id = summary.id
    if session_id is None:
        raise UserError("say which session to resume (an ID from `sparkcode sessions list`)")
    session = store.load(session_id)
    rebuilt = await rebuild_conversation(session, turn=turn, store=store)
    recorded = Path(rebuilt.workspace) if rebuilt.workspace else workspace
    tree = recorded_worktree(session.header)
    if tree is not None and recorded != workspace:
        # A session of a worktree resumes in it, from anywhere in its repository.
        path, branch = tree
        if not recorded.is_dir():
            raise UserError(
                f"session {session.id} worked in the worktree {path} (branch {branch}), "
                f"which was removed; to bring it back, check the branch out there again "
                f"(git worktree add {path} {branch}, if the branch still exists)"
            )
        if any_workspace or same_repository(workspace, path):
            return rebuilt
    if not any_workspace and recorded != workspace:
        raise WorkspaceMismatch(session.id, recorded, workspace)
    return rebuilt


def write_fork(paths: Paths, rebuilt: Rebuilt, engine: dict[str, object]) -> str:
    """A new recording that continues ``rebuilt`` (its parent, at its turn); its ID.

    The fork holds only its header until it is resumed: its conversation is the
    parent's up to ``parent_turn``, rebuilt from the parent's recording.
    """
    recorder = SessionRecorder(
        paths.sessions_dir,
        workspace=rebuilt.workspace,
        engine=engine,
        origin="fork",
        extra={"parent": rebuilt.session_id, "parent_turn": rebuilt.turns},
    )
    recorder.close()
    if recorder.failed is not None:
        raise UserError(f"cannot write the fork {recorder.path}: {recorder.failed}")
    return recorder.session_id


__all__ = ["WorkspaceMismatch", "find_resume", "latest_session", "write_fork"]
