"""Starting a session: the start's target resolved once, the connection to it, the
agent built on it, and which recorded session to continue.

Every front (the TUI, ``sparkcode run``, ``sparkcode acp``, the agent bench) starts a
session through this package: :func:`resolve_target` once per start, then
:func:`build_session` when it needs the agent; :func:`find_resume` names the recorded
conversation a start continues (``SessionOptions.resume``). The modules inside are
private (``_builder.py`` the builder and the one settings overlay, ``_connection.py``
the reached server and its ``/v1/models``, ``_resume.py`` the session to continue).

:mod:`sparkcode.target` (the one ``Target``) stays beside this package, not in it:
replay's ``--rerun`` and ``sparkcode bench`` reach engines through it, and the builder
needs replay's rebuilt conversation, so ``Target`` sits below ``replay`` and this
package above it; one package would be the circle start -> replay -> start.
"""

from ._builder import (
    AgentSession,
    SessionOptions,
    StartTarget,
    build_session,
    resolve_target,
    session_seed,
    session_settings,
)
from ._connection import Connection, EndpointError, budget_to_send, connect
from ._resume import WorkspaceMismatch, find_resume, latest_session, write_fork

__all__ = [
    "AgentSession",
    "Connection",
    "EndpointError",
    "SessionOptions",
    "StartTarget",
    "WorkspaceMismatch",
    "budget_to_send",
    "build_session",
    "connect",
    "find_resume",
    "latest_session",
    "resolve_target",
    "session_seed",
    "session_settings",
    "write_fork",
]
