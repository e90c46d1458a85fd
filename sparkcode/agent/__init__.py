"""The coding agent, one folder per idea: ``wire/`` (the engine's streaming API),
``core/`` (the conversation), ``scaffold/`` (the small-model mechanisms), ``tools/``,
``lsp/`` (language servers) and ``extensions/`` (MCP, skills, instructions, hooks).

Public surface (used by the TUI, ``sparkcode run`` and the session recorder):

- :class:`ChatClient` (``wire/client.py``): streaming chat completions over an httpx
  transport the caller may wrap (recording) or replace (``MockTransport``).
- :class:`Agent` / :class:`AgentSettings` (``core/loop.py``): ``run_turn(text)`` is an
  async generator of events; ``subscribe(cb)`` for observers; ``undo()``.
- :class:`~.scaffold.Scaffold` (``scaffold/``): the small-model mechanisms, one guard
  module each, which a turn calls at named points (``Agent.scaffold``).
- The events (``core/events.py``), :class:`MetricsPoller` (``wire/metrics.py``),
  :class:`UndoStore` (``core/undo.py``), :class:`Permissions` (``core/permissions.py``).
- :func:`salvage` (``scaffold/salvage.py``): tool calls recovered from a reply's text;
  public for the salvage study (``bench/studies/salvage_rate.py``) that measures it."""

from __future__ import annotations

from .core.calls import check_call
from .core.events import *  # noqa: F403
from .core.events import __all__ as _event_names
from .core.gitlib import require_git
from .core.loop import DEFAULT_SYSTEM_PROMPT, Agent, AgentSettings, Approver
from .core.permissions import Permissions
from .core.undo import UndoError, UndoStore
from .scaffold.salvage import Salvage, recover, salvage
from .scaffold.structured import RESULT_PREFIX
from .tools import ToolRegistry, default_tools
from .wire.chat_types import TASK_HEADER, api_key_headers
from .wire.client import ChatClient, ChatError, ChatResult, EngineGone, ModelCard
from .wire.metrics import MetricsPoller, parse_metrics

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
