"""``sparkcode acp``: sparkcode as an Agent Client Protocol (ACP v1) agent over stdio.

Editors (Zed, JetBrains, Neovim's CodeCompanion, Emacs agent-shell, Toad) spawn
``sparkcode acp`` and speak JSON-RPC 2.0 on its stdin/stdout through the
official SDK (PyPI ``agent-client-protocol``, import ``acp``). A front as thin
as ``sparkcode run``: every session is built by :mod:`sparkcode.start`.

- ``_agent``: initialize, session/new, session/load, modes, prompt, cancel.
- ``_session``: one session's background build, turns, approvals, commands.
- ``_updates``: agent events -> ``session/update`` payloads (pure).
- ``_commands``: the session modes (permission modes) and slash commands.
- ``_stdio``: stdout kept for the protocol; JSON-RPC errors for bad lines.
"""

from __future__ import annotations

from ._agent import AcpOptions, SparkcodeAcpAgent, latest_continuation, mcp_configs
from ._stdio import LineTransport, protocol_stdout, serve
from ._updates import UpdateMapper, history_updates

__all__ = [
    "AcpOptions",
    "LineTransport",
    "SparkcodeAcpAgent",
    "UpdateMapper",
    "history_updates",
    "latest_continuation",
    "mcp_configs",
    "protocol_stdout",
    "serve",
]
