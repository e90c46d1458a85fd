"""The user's ``config.toml`` (``Paths.config_file``), declared as msgspec structs that
forbid unknown keys: ``_config.py`` the file, its ``[agent]`` (the agent's knobs plus
``permission_mode``, ``profile``, ``seed``), ``[permissions]``, ``[sandbox]``, ``[tui]``,
``[web_fetch]``, ``[mcp.servers.NAME]`` and ``[[hooks.EVENT]]`` (declared in
:mod:`sparkcode.hooks`), with the file's example; ``_diagnostics.py`` its
``[diagnostics]``; ``_keys.py`` its ``[keys]`` and the table of the TUI's bindable
actions. :func:`load_config` reads the file (missing: the defaults), :func:`parse_config`
a text; a malformed one is a :class:`ConfigError` naming the file and the key.
"""

from ._config import (
    DEGENERATE_MODES,
    KEY_ACTIONS,
    PERMISSION_MODES,
    PYTHON_SERVER,
    SEVERITIES,
    AgentTable,
    Config,
    ConfigError,
    DegenerateMode,
    DiagnosticsConfig,
    KeyAction,
    LanguageServerConfig,
    McpServerConfig,
    NotifyMode,
    PermissionMode,
    PermissionRule,
    Severity,
    WebFetchConfig,
    Where,
    load_config,
    parse_config,
)

__all__ = [
    "DEGENERATE_MODES",
    "KEY_ACTIONS",
    "PERMISSION_MODES",
    "PYTHON_SERVER",
    "SEVERITIES",
    "AgentTable",
    "Config",
    "ConfigError",
    "DegenerateMode",
    "DiagnosticsConfig",
    "KeyAction",
    "LanguageServerConfig",
    "McpServerConfig",
    "NotifyMode",
    "PermissionMode",
    "PermissionRule",
    "Severity",
    "WebFetchConfig",
    "Where",
    "load_config",
    "parse_config",
]
