"""GitPython, imported so that a machine without git fails where git is used, clearly.

GitPython looks for the ``git`` binary when it is imported and raises an ImportError
with a page of advice when there is none, so every ``sparkcode`` command (``engine
status`` included) died at start with a traceback, and an editor running ``sparkcode
acp`` waited forever on an agent that was gone (seen in Toad, in a chroot without
git). Imported through here, GitPython stays quiet at import and
:func:`require_git` names the problem where a session starts.
"""

from __future__ import annotations

import os
import shutil

from engine.errors import UserError

os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")

import git  # noqa: E402  (after the variable: GitPython reads it at import)

__all__ = ["git", "require_git"]


def require_git() -> str:
    """The git binary's path, or a :class:`UserError` saying what is missing and why."""
    path = shutil.which("git")
    if path is None:
        raise UserError(
            "git is not installed (or not on PATH): sparkcode's undo keeps "
            "its snapshots and the git tool works with it; install git "
            "(Debian and Ubuntu: apt install git) and start again"
        )
    return path
