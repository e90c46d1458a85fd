"""Diagnostics after edits, and the navigation tools, from real language servers over
LSP (stdio JSON-RPC).

:class:`Diagnostics` is a session's :class:`~..tools.EditChecker`: after
``edit_file``, ``multi_edit`` and ``write_file`` it hands the file's text before and
after the edit to the language server of its language (basedpyright for Python by
default, others from ``config.toml`` ``[diagnostics.servers.NAME]``), and the
problems the edit introduced are appended to the edit's result. Modules:
``_rpc`` (framing and JSON-RPC), ``_server`` (one server process: initialize,
didOpen/didChange, publishDiagnostics by version), ``_launch`` (finding the
program, confining it read-only), ``_report`` (which diagnostics are new, and
their text), ``_hub`` (the session's servers: lazy start, waits, notices).

The same servers answer the model's ``definition``, ``references`` and ``rename``
(:func:`navigation_tools`): ``_positions`` (names, lines and LSP's UTF-16 positions;
a ``WorkspaceEdit`` as each file's edits), ``_navigate`` (the requests, after the
files changed on disk are sent), ``_nav_tools`` (the tools; a rename is written
through the edit tools' path, ``tools.apply_changes``).
"""

from ._hub import MAX_STARTS, MAX_TIMEOUTS, NAVIGATION_S, STARTUP_S, Diagnostics
from ._launch import confined, find_program
from ._nav_tools import Definition, References, Rename, navigation_tools
from ._report import introduced, line_of, render
from ._rpc import JsonRpc, RpcError, ServerGone
from ._server import LanguageServer

__all__ = [
    "MAX_STARTS",
    "MAX_TIMEOUTS",
    "NAVIGATION_S",
    "STARTUP_S",
    "Definition",
    "Diagnostics",
    "JsonRpc",
    "LanguageServer",
    "References",
    "Rename",
    "RpcError",
    "ServerGone",
    "confined",
    "find_program",
    "introduced",
    "line_of",
    "navigation_tools",
    "render",
]
