"""One operations layer: every slash command declared once for both fronts.

:mod:`._registry` holds :class:`Operation` and :data:`REGISTRY`; :mod:`._builtin`
declares sparkcode's commands; :mod:`._ops` is the agent as an operation sees it.
The TUI (``sparkcode.tui.commands``, ``completion``, ``palette``) and ACP
(``sparkcode.acp._commands``) build their command lists and dispatch from here;
this package imports neither.
"""

from ._builtin import EFFORTS, EXPORT_USAGE
from ._ops import AgentOps, Ops
from ._registry import (
    BOTH,
    FRONTS,
    REGISTRY,
    Arg,
    Front,
    Operation,
    OperationError,
    Reply,
    Setting,
    offered,
    register,
    registered,
)

__all__ = [
    "BOTH",
    "EFFORTS",
    "EXPORT_USAGE",
    "FRONTS",
    "REGISTRY",
    "AgentOps",
    "Arg",
    "Front",
    "Operation",
    "OperationError",
    "Ops",
    "Reply",
    "Setting",
    "offered",
    "register",
    "registered",
]
