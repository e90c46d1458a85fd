"""The coding agent: an OpenAI-compatible streaming client, tools, and the loop.

Public surface (used by the TUI, ``sparkcode run`` and the session recorder):

- :class:`ChatClient` (``client.py``): streaming chat completions over an httpx
  transport the caller may wrap (recording) or replace (``MockTransport``).
- :class:`Agent` / :class:`AgentSettings` (``loop.py``): ``run_turn(text)`` is an
  async generator of events; ``subscribe(cb)`` for observers; ``undo()``.
- :class:`~.scaffold.Scaffold` (``scaffold/``): the small-model mechanisms, one guard
  module each, which a turn calls at named points (``Agent.scaffold``).
- The events (``events.py``), :class:`MetricsPoller` (``metrics.py``),
  :class:`UndoStore` (``undo.py``), :class:`Permissions` (``permissions.py``).
- :func:`salvage` (``_salvage.py``): tool calls recovered from a reply's text; public
  for the salvage study (``bench/studies/salvage_rate.py``) that measures it.
"""

from __future__ import annotations

from ._calls import check_call
from ._chat_types import TASK_HEADER, api_key_headers
from ._gitlib import require_git
from ._salvage import Salvage, recover, salvage
from ._structured import RESULT_PREFIX
from .client import ChatClient, ChatError, ChatResult, EngineGone, ModelCard
from .events import *  # noqa: F403
from .events import __all__ as _event_names
from .loop import DEFAULT_SYSTEM_PROMPT, Agent, AgentSettings, Approver
from .metrics import MetricsPoller, parse_metrics
from .permissions import Permissions
from .tools import ToolRegistry, default_tools
from .undo import UndoError, UndoStore

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "RESULT_PREFIX",
    "TASK_HEADER",
    "Agent",
    "AgentSettings",
    "Approver",
    "ChatClient",
    "ChatError",
    "ChatResult",
    "EngineGone",
    "MetricsPoller",
    "ModelCard",
    "Permissions",
    "Salvage",
    "ToolRegistry",
    "UndoError",
    "UndoStore",
    "api_key_headers",
    "check_call",
    "default_tools",
    "parse_metrics",
    "recover",
    "require_git",
    "salvage",
    *_event_names,
]
