"""Diagnostics after edits from real language servers over LSP (stdio JSON-RPC).

:class:`Diagnostics` is a session's :class:`~..tools.EditChecker`: after
``edit_file``, ``multi_edit`` and ``write_file`` it hands the file's text before and
after the edit to the language server of its language (basedpyright for Python by
default, others from ``config.toml`` ``[diagnostics.servers.NAME]``), and the
problems the edit introduced are appended to the edit's result. Modules:
``_rpc`` (framing and JSON-RPC), ``_server`` (one server process: initialize,
didOpen/didChange, publishDiagnostics by version), ``_launch`` (finding the
program, confining it read-only), ``_report`` (which diagnostics are new, and
their text), ``_hub`` (the session's servers: lazy start, waits, notices).
"""

from ._hub import MAX_STARTS, MAX_TIMEOUTS, STARTUP_S, Diagnostics
from ._launch import confined, find_program
from ._report import introduced, line_of, render
from ._rpc import JsonRpc, RpcError, ServerGone
from ._server import LanguageServer

__all__ = [
    "MAX_STARTS",
    "MAX_TIMEOUTS",
    "STARTUP_S",
    "Diagnostics",
    "JsonRpc",
    "LanguageServer",
    "RpcError",
    "ServerGone",
    "confined",
    "find_program",
    "introduced",
    "line_of",
    "render",
]
