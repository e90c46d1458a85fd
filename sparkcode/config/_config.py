"""The user's sparkcode configuration file (``Paths.config_file``, TOML).

Example::

    [agent]
    permission_mode = "sandbox"    # sandbox | ask | auto-edit | full-auto | plan
    reasoning_effort = "low"       # overrides the profile's default
    thinking_token_budget = 1536   # -1 = unlimited
    max_turns = 50                 # model requests per user message
    bash_timeout_s = 120
    stream_idle_timeout_s = 900    # how long a stream may send nothing (unset: 600 s, or
                                   # more where the measured prefill rate needs it)
    profile = "cpu-demo"           # default engine profile
    temperature = 0.6              # sampling; overrides the profile's (unset: server default)
    top_p = 0.95
    seed = "random"                # "random": a fresh seed per session (recorded),
                                   # an integer: that session seed, "off": send none
    degenerate_streams = "stop"    # stop | warn | off: a looping or garbled stream
    compact_threshold = 0.8        # share of the context window that compacts the history
    image_max_mib = 5              # size cap per attached image (docs/agent.md, Images)
    # ... and any other knob of engine.profiles.AgentKnobs (structured_tools,
    # tools, max_tokens...): a profile's [agent] takes the same keys; config.toml's
    # value wins over the profile's, a start's (run --temperature) over both.

    [permissions]
    # "tool" or "tool:glob"; the glob matches the shell command for bash, the
    # path for file tools and the message for git_commit. deny beats allow.
    allow = ["bash:pytest*", "edit_file:docs/*"]
    deny = ["bash:rm -rf *", "write_file:.env"]

    [sandbox]                      # the bubblewrap sandbox of mode "sandbox"
    network = false                # let sandboxed commands use the network
    writable = ["~/.cache/pip"]    # more writable directories (absolute or ~)

    [tui]
    notify = "both"                # off | bell | desktop | both: when a turn ends or an
                                   # approval waits while the terminal is not focused

    [keys]                         # the TUI's keys: action = "key" (docs/tui.md lists
    editor = "f4"                  # the actions and their defaults; "ctrl+q,ctrl+d"
    quit = "ctrl+q,ctrl+d"         # gives one several keys)

    [[hooks.PostToolUse]]          # a command after each matching tool call
    matcher = "edit_file|write_file|multi_edit"   # a regex on tool names
    command = "ruff format --quiet ."             # the event's JSON on stdin
    timeout_s = 60                                # (sparkcode.hooks)

    [web_fetch]                    # the web_fetch tool (off unless enabled)
    enabled = true
    allow_private = false          # fetch loopback/private/link-local addresses too
    max_bytes = 2000000            # bytes read from the response at most
    timeout_s = 20

    [diagnostics]                  # language-server diagnostics in edit results
    enabled = true                 # (sparkcode.agent.lsp; docs/agent.md, Diagnostics)
    timeout_s = 4                  # the longest an edit waits for them
    max_items = 10                 # new problems shown per edit
    max_chars = 2000
    severity = "error"             # error | warning | information | hint: the least shown
    [diagnostics.servers.rust]     # a server per language (python: basedpyright built in)
    command = "rust-analyzer"
    extensions = [".rs"]

    [mcp.servers.files]            # an MCP server over stdio
    command = "uvx"
    args = ["mcp-server-filesystem", "."]
    env = { TOKEN = "..." }        # added to sparkcode's environment
    [mcp.servers.search]           # an MCP server over streamable HTTP
    url = "http://127.0.0.1:8000/mcp"

Without ``permission_mode`` the mode is ``sandbox`` where bubblewrap works and
``ask`` elsewhere; what each mode allows is in ``docs/agent.md``.

A missing file means the defaults; a malformed one is a :class:`ConfigError`
naming the file and the key.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from msgspec import Meta

from engine.errors import UserError
from engine.paths import Paths
from engine.profiles import (
    DEGENERATE_MODES,
    AgentKnobs,
    DegenerateMode,
    TomlTable,
    convert_toml,
    decode_toml,
)

from ..hooks import HookSpec, parse_hooks_table
from ._diagnostics import (
    PYTHON_SERVER,
    SEVERITIES,
    DiagnosticsConfig,
    DiagnosticsTable,
    LanguageServerConfig,
    LanguageServerTable,
    Severity,
)
from ._keys import KEY_ACTIONS, KeyAction, Where, parse_keys

PermissionMode = Literal["sandbox", "ask", "auto-edit", "full-auto", "plan"]
PERMISSION_MODES: tuple[PermissionMode, ...] = ("sandbox", "ask", "auto-edit", "full-auto", "plan")
NotifyMode = Literal["off", "bell", "desktop", "both"]
NOTIFY_MODES: tuple[NotifyMode, ...] = ("off", "bell", "desktop", "both")
Seed = (
    Annotated[
        int, Meta(ge=0, le=2**63 - 1, description=('"random", "off" or a non-negative integer'))
    ]
    | Literal["random", "off"]
)


class ConfigError(UserError):
    """``config.toml`` is malformed."""


@dataclass(frozen=True)
class PermissionRule:
    """``tool`` or ``tool:glob`` from the config's allow/deny lists."""

    tool: str
    pattern: str | None = None

    @classmethod
    def parse(cls, text: str) -> PermissionRule:
        tool, sep, pattern = text.partition(":")
        return cls(tool=tool.strip(), pattern=pattern.strip() if sep else None)

    def matches(self, tool: str, subject: str) -> bool:
        if not fnmatch.fnmatchcase(tool, self.tool):
            return False
        return self.pattern is None or fnmatch.fnmatchcase(subject, self.pattern)

    def __str__(self) -> str:
        return self.tool if self.pattern is None else f"{self.tool}:{self.pattern}"


@dataclass(frozen=True)
class McpServerConfig:
    """One ``[mcp.servers.NAME]`` table: ``command`` (stdio) or ``url`` (HTTP)."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: Path | None = None
    url: str | None = None
    startup_timeout_s: float = 30.0
    call_timeout_s: float = 120.0


class _Table(TomlTable, frozen=True):
    """One table of ``config.toml``."""


_Seconds = Annotated[float, Meta(gt=0, description="a positive number of seconds")]


class WebFetchConfig(_Table, frozen=True):
    """``[web_fetch]``: the tool is offered only when ``enabled``."""

    enabled: bool = False
    allow_private: bool = False
    """Also fetch loopback, private, link-local and reserved addresses."""
    max_bytes: Annotated[int, Meta(ge=1024, description="an integer of at least 1024")] = 2_000_000
    timeout_s: _Seconds = 20.0


class AgentTable(AgentKnobs, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``config.toml``'s ``[agent]``: the agent's knobs (:class:`AgentKnobs`, which a
    profile and a start can also set) and three of the user's own."""

    permission_mode: PermissionMode | None = None
    """``None``: ``sandbox`` where bubblewrap works, else ``ask``."""
    profile: str | None = None
    """The default engine profile."""
    seed: Seed = "random"
    """The session seed every request's ``seed`` is derived from (see
    :func:`sparkcode.agent.wire.sampling.request_seed`); per user or per start, not
    per profile: a profile describes an engine, a seed a run."""


class Config(AgentTable, frozen=True, kw_only=True):
    """Everything ``config.toml`` can set: ``[agent]`` (its knobs ``None`` where the
    file says nothing: the profile's, then ``AgentSettings``' defaults apply) and
    the other tables, read."""

    allow: tuple[PermissionRule, ...] = ()
    deny: tuple[PermissionRule, ...] = ()
    sandbox_network: bool = False
    sandbox_writable: tuple[Path, ...] = ()
    mcp_servers: tuple[McpServerConfig, ...] = ()
    notify: NotifyMode = "both"
    """How the TUI calls the user back to an unfocused terminal: the bell, a desktop
    notification (OSC 9 and OSC 777), both, or nothing."""
    hooks: tuple[HookSpec, ...] = ()
    """The user's hooks (``[[hooks.EVENT]]``); the project's are read per workspace."""
    web_fetch: WebFetchConfig = WebFetchConfig()
    diagnostics: DiagnosticsConfig = DiagnosticsConfig()
    keys: tuple[tuple[str, str], ...] = ()
    """``[keys]`` checked: (Textual binding id, key string) pairs for the TUI's keymap
    (``_keys.KEY_ACTIONS`` names the actions)."""
    source: Path | None = None


_Rules = Annotated[
    tuple[Annotated[str, Meta(min_length=1)], ...],
    Meta(description="a list of 'tool' or 'tool:glob' strings"),
]


class _PermissionsTable(_Table, frozen=True):
    allow: _Rules = ()
    deny: _Rules = ()


class _SandboxTable(_Table, frozen=True):
    network: bool = False
    writable: Annotated[
        tuple[Annotated[str, Meta(min_length=1)], ...],
        Meta(description="a list of directory paths"),
    ] = ()


class _McpTable(_Table, frozen=True):
    servers: dict[str, dict[str, Any]] = {}


class _McpServerTable(_Table, frozen=True):
    command: Annotated[str, Meta(min_length=1, description="a non-empty string")] | None = None
    args: tuple[str, ...] = ()
    env: Annotated[dict[str, str], Meta(description="a table of strings")] = {}
    cwd: Annotated[str, Meta(description="a path")] | None = None
    url: str | None = None
    startup_timeout_s: _Seconds = 30.0
    call_timeout_s: _Seconds = 120.0


class _TuiTable(_Table, frozen=True):
    notify: NotifyMode = "both"


class _ConfigFile(_Table, frozen=True):
    """``config.toml``'s tables (the example at the top of this module)."""

    agent: AgentTable = AgentTable()
    permissions: _PermissionsTable = _PermissionsTable()
    sandbox: _SandboxTable = _SandboxTable()
    mcp: _McpTable = _McpTable()
    tui: _TuiTable = _TuiTable()
    web_fetch: WebFetchConfig = WebFetchConfig()
    hooks: dict[str, Any] = {}
    diagnostics: DiagnosticsTable = DiagnosticsTable()
    keys: Annotated[dict[str, str], Meta(description='a table of action = "key" strings')] = {}


_MCP_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")


def load_config(paths: Paths) -> Config:
    """Read ``config.toml``; defaults when it does not exist."""
    path = paths.config_file
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Config()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    return parse_config(text, path)


def parse_config(text: str, source: Path) -> Config:
    doc = decode_toml(text, _ConfigFile, source, ConfigError, colon=True)
    writable = tuple(Path(w).expanduser() for w in doc.sandbox.writable)
    for w, p in zip(doc.sandbox.writable, writable, strict=True):
        if not p.is_absolute():
            raise ConfigError(
                f"{source}: [sandbox] writable: {w!r} is not an absolute path (or ~/...)"
            )
    agent = {name: getattr(doc.agent, name) for name in AgentTable.__struct_fields__}
    return Config(
        **agent,
        allow=tuple(PermissionRule.parse(v) for v in doc.permissions.allow),
        deny=tuple(PermissionRule.parse(v) for v in doc.permissions.deny),
        sandbox_network=doc.sandbox.network,
        sandbox_writable=writable,
        mcp_servers=_mcp_servers(doc.mcp.servers, source),
        notify=doc.tui.notify,
        hooks=parse_hooks_table(doc.hooks, f"{source}: [hooks]"),
        web_fetch=doc.web_fetch,
        diagnostics=_diagnostics(doc.diagnostics, source),
        keys=_keys(doc.keys, source),
        source=source,
    )


def _keys(table: dict[str, str], source: Path) -> tuple[tuple[str, str], ...]:
    try:
        return parse_keys(table)
    except ValueError as exc:
        raise ConfigError(f"{source}: [keys] {exc}") from None


def _diagnostics(table: DiagnosticsTable, source: Path) -> DiagnosticsConfig:
    servers = {PYTHON_SERVER.name: PYTHON_SERVER}
    for name, raw in table.servers.items():
        where = f"{source}: [diagnostics.servers.{name}]"
        _check_name(name, where)
        server = convert_toml(
            raw, LanguageServerTable, source, ConfigError, colon=True, where=where
        )
        servers[name] = server.server(name)
    knobs = {name: getattr(table, name) for name in table.__struct_fields__ if name != "servers"}
    return DiagnosticsConfig(**knobs, servers=tuple(servers.values()))


def _check_name(name: str, where: str) -> None:
    if not _MCP_NAME.fullmatch(name):
        raise ConfigError(
            f"{where}: the name may use only letters, digits, '_' and '-' (at most 32)"
        )


def _mcp_servers(tables: dict[str, dict[str, Any]], source: Path) -> tuple[McpServerConfig, ...]:
    out = []
    for name, raw in tables.items():
        where = f"{source}: [mcp.servers.{name}]"
        _check_name(name, where)
        table = convert_toml(raw, _McpServerTable, source, ConfigError, colon=False, where=where)
        if (table.command is None) == (table.url is None):
            raise ConfigError(f"{where}: give either command (stdio) or url (streamable HTTP)")
        if table.url is not None and not table.url.startswith(("http://", "https://")):
            raise ConfigError(f"{where}: url must be an http:// or https:// URL")
        out.append(
            McpServerConfig(
                name=name,
                command=table.command,
                args=table.args,
                env=tuple(sorted(table.env.items())),
                cwd=Path(table.cwd).expanduser() if table.cwd else None,
                url=table.url,
                startup_timeout_s=table.startup_timeout_s,
                call_timeout_s=table.call_timeout_s,
            )
        )
    return tuple(out)


__all__ = [
    "DEGENERATE_MODES",
    "PERMISSION_MODES",
    "PYTHON_SERVER",
    "SEVERITIES",
    "AgentTable",
    "Config",
    "ConfigError",
    "DegenerateMode",
    "KEY_ACTIONS",
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
