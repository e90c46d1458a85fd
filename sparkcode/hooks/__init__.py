"""Hooks as declared and trusted: a user's command on an agent event (Claude Code's
contract), read from ``config.toml``'s ``[[hooks.EVENT]]``, ``.sparkcode/hooks.toml``
and ``.claude/settings.json`` (``_specs.py``), and the projects the user trusts to run
their own (``_trust.py``, remembered per path).

Three layers, one idea: this package's ``__init__`` is below the agent (``config.toml``
is parsed into :class:`HookSpec` here, and the agent's runner takes them);
running a hook is the agent's (:mod:`sparkcode.agent.extensions.hooks`: the loop calls it at its
events, and it yields the agent's ``HookRan`` event); which hooks a session runs (the
project's only once trusted) and how a front says a run are above the agent, in the
public :mod:`sparkcode.hooks.session`, which this ``__init__`` does not import: the
runner imports the declarations from here, so importing the session part here would
be the circle hooks -> agent.hooks -> hooks.
"""

from ._specs import (
    CLAUDE_TOOL_NAMES,
    DEFAULT_TIMEOUT_S,
    HOOK_EVENTS,
    PROJECT_HOOK_FILES,
    HookConfigError,
    HookEvent,
    HookSpec,
    parse_claude_hooks,
    parse_hooks_table,
    project_hooks,
)
from ._trust import TrustStore

__all__ = [
    "CLAUDE_TOOL_NAMES",
    "DEFAULT_TIMEOUT_S",
    "HOOK_EVENTS",
    "PROJECT_HOOK_FILES",
    "HookConfigError",
    "HookEvent",
    "HookSpec",
    "TrustStore",
    "parse_claude_hooks",
    "parse_hooks_table",
    "project_hooks",
]
