"""The one exception type every layer raises for problems a user can fix.

The CLI turns a :class:`UserError` into a single ``error: ...`` line and a
non-zero exit instead of a traceback, so raise it (or a subclass) whenever the
cause is bad input, a bad file, a busy port, a dead engine and the like.
"""

from __future__ import annotations


class UserError(Exception):
    """A problem the user can act on; its message is shown as-is."""

    exit_code: int = 1

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class ProfileError(UserError):
    """An engine profile is unknown, malformed or invalid."""


class EngineStateError(UserError):
    """The engine is not in a state that allows the requested action."""
