"""The user's sparkcode configuration file (``Paths.config_file``, TOML).

Example::

    [agent]
    permission_mode = "sandbox"    # sandbox | ask | auto-edit | full-auto | plan
    reasoning_effort = "low"       # overrides the profile's default
    thinking_token_budget = 1536   # -1 = unlimited
    max_turns = 50                 # model requests per user message
    bash_timeout_s = 120
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

    [[hooks.PostToolUse]]          # a command after each matching tool call
    matcher = "edit_file|write_file|multi_edit"   # a regex on tool names
    command = "ruff format --quiet ."             # the event's JSON on stdin
    timeout_s = 60                                # (sparkcode.hook_specs)

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from engine.errors import UserError
from engine.paths import Paths
from engine.profiles import (
    DEGENERATE_MODES,
    AgentKnobs,
    DegenerateMode,
    convert_toml,
    decode_toml,
)

from .hook_specs import HookSpec, parse_hooks_table

PermissionMode = Literal["sandbox", "ask", "auto-edit", "full-auto", "plan"]
PERMISSION_MODES: tuple[PermissionMode, ...] = ("sandbox", "ask", "auto-edit", "full-auto",
                                                "plan")
NotifyMode = Literal["off", "bell", "desktop", "both"]
NOTIFY_MODES: tuple[NotifyMode, ...] = ("off", "bell", "desktop", "both")
Seed = Annotated[int, Meta(ge=0, le=2**63 - 1, description=(
    '"random", "off" or a non-negative integer'))] | Literal["random", "off"]


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


class _Table(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One table of ``config.toml``."""


_Seconds = Annotated[float, Meta(gt=0, description="a positive number of seconds")]


class WebFetchConfig(_Table, frozen=True):
    """``[web_fetch]``: the tool is offered only when ``enabled``."""

    enabled: bool = False
    allow_private: bool = False
    """Also fetch loopback, private, link-local and reserved addresses."""
    max_bytes: Annotated[int, Meta(ge=1024, description="an integer of at least 1024")] \
        = 2_000_000
    timeout_s: _Seconds = 20.0


# -- [diagnostics]: language-server diagnostics after edits (sparkcode.agent.lsp) -----

Severity = Literal["error", "warning", "information", "hint"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "information", "hint")
"""LSP's severities 1..4, most severe first."""


@dataclass(frozen=True)
class LanguageServerConfig:
    """One ``[diagnostics.servers.NAME]`` table: a language server over stdio for the
    files whose names end in one of ``extensions``."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    extensions: tuple[str, ...] = ()
    language_id: str = ""
    """The LSP ``languageId`` of its files (empty: the table's name)."""
    settings: dict[str, Any] = field(default_factory=dict)
    """The answers to the server's ``workspace/configuration`` (by dotted section),
    also sent once as ``workspace/didChangeConfiguration``."""


PYTHON_SERVER = LanguageServerConfig(
    name="python", command="basedpyright-langserver", args=("--stdio",),
    extensions=(".py", ".pyi"), language_id="python",
    settings={"basedpyright": {"analysis": {"typeCheckingMode": "standard"}}})
"""The built-in server: basedpyright, a dependency that brings its own Node. Its own
default mode ("recommended") also flags style (reportAny, reportUnusedCallResult: a
warning on every bare call); "standard" is pyright's default, type errors. A project's
pyrightconfig.json or ``[tool.basedpyright]`` still wins."""


@dataclass(frozen=True)
class DiagnosticsConfig:
    """``[diagnostics]``: what an edit's result says about the problems it introduced."""

    enabled: bool = True
    timeout_s: float = 4.0
    """The longest one edit waits for a running server. A warm basedpyright answered an
    edit of a small file (two analyses: before and after) in 0.3-1.2 s here, 2 cores at
    load 5-10; 4 s is three times the slow end and short beside a model's turn. A
    server's first answer may take longer (``sparkcode.agent.lsp.STARTUP_S``)."""
    max_items: int = 10
    """New problems listed per edit; the rest are counted."""
    max_chars: int = 2000
    """Characters of the listing at most (a long type message is cut)."""
    severity: Severity = "error"
    """The least severe problem listed."""
    servers: tuple[LanguageServerConfig, ...] = (PYTHON_SERVER,)
    """The built-in Python server, replaced or joined by ``[diagnostics.servers.NAME]``."""


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_DIAGNOSTICS_KEYS = {"enabled", "timeout_s", "max_items", "max_chars", "severity", "servers"}
_SERVER_KEYS = {"command", "args", "extensions", "language_id", "settings"}


def _diagnostics(table: dict[str, Any], source: Path) -> DiagnosticsConfig:
    where = f"{source}: [diagnostics]"
    unknown = set(table) - _DIAGNOSTICS_KEYS
    if unknown:
        raise ConfigError(f"{where} unknown key {sorted(unknown)[0]!r} "
                          f"(known: {', '.join(sorted(_DIAGNOSTICS_KEYS))})")
    if not isinstance(table.get("enabled", True), bool):
        raise ConfigError(f"{where} enabled: must be true or false")
    timeout = table.get("timeout_s", 4.0)
    if not _is_number(timeout) or not 0 < timeout <= 120:
        raise ConfigError(f"{where} timeout_s: must be a number of seconds in (0, 120]")
    for key, least in (("max_items", 1), ("max_chars", 200)):
        if not _is_int(table.get(key, least)) or table.get(key, least) < least:
            raise ConfigError(f"{where} {key}: must be an integer of at least {least}")
    severity = table.get("severity", "error")
    if severity not in SEVERITIES:
        raise ConfigError(f"{where} severity: must be one of {', '.join(SEVERITIES)}")
    servers = {PYTHON_SERVER.name: PYTHON_SERVER}
    tables = table.get("servers", {})
    if not isinstance(tables, dict):
        raise ConfigError(f"{where} servers: must be tables [diagnostics.servers.NAME]")
    for name, spec in tables.items():
        servers[name] = _language_server(name, spec, f"{source}: [diagnostics.servers.{name}]")
    return DiagnosticsConfig(
        enabled=table.get("enabled", True), timeout_s=float(timeout),
        max_items=table.get("max_items", 10), max_chars=table.get("max_chars", 2000),
        severity=severity, servers=tuple(servers.values()))


def _language_server(name: str, spec: Any, where: str) -> LanguageServerConfig:
    if not _MCP_NAME.fullmatch(name):
        raise ConfigError(f"{where}: the name may use only letters, digits, '_' and '-' "
                          "(at most 32)")
    if not isinstance(spec, dict):
        raise ConfigError(f"{where} must be a table")
    unknown = set(spec) - _SERVER_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown key {sorted(unknown)[0]!r} "
                          f"(known: {', '.join(sorted(_SERVER_KEYS))})")
    command = spec.get("command")
    if not isinstance(command, str) or not command.strip():
        raise ConfigError(f"{where}: command must be a non-empty string (the server's "
                          "program; its arguments go in args)")
    args = spec.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ConfigError(f"{where}: args must be a list of strings")
    extensions = spec.get("extensions", [])
    if not isinstance(extensions, list) or not extensions or not all(
            isinstance(e, str) and e.startswith(".") and len(e) > 1 for e in extensions):
        raise ConfigError(f"{where}: extensions must be a non-empty list like [\".rs\"]")
    language_id = spec.get("language_id", name)
    if not isinstance(language_id, str) or not language_id:
        raise ConfigError(f"{where}: language_id must be a non-empty string")
    settings = spec.get("settings", {})
    if not isinstance(settings, dict):
        raise ConfigError(f"{where}: settings must be a table")
    return LanguageServerConfig(name=name, command=command, args=tuple(args),
                                extensions=tuple(extensions), language_id=language_id,
                                settings=settings)


# -- end of [diagnostics] ------------------------------------------------------------


class AgentTable(AgentKnobs, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``config.toml``'s ``[agent]``: the agent's knobs (:class:`AgentKnobs`, which a
    profile and a start can also set) and three of the user's own."""

    permission_mode: PermissionMode | None = None
    """``None``: ``sandbox`` where bubblewrap works, else ``ask``."""
    profile: str | None = None
    """The default engine profile."""
    seed: Seed = "random"
    """The session seed every request's ``seed`` is derived from (see
    :func:`sparkcode.agent.sampling.request_seed`); per user or per start, not
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
    source: Path | None = None


_Rules = Annotated[tuple[Annotated[str, Meta(min_length=1)], ...],
                   Meta(description="a list of 'tool' or 'tool:glob' strings")]


class _PermissionsTable(_Table, frozen=True):
    allow: _Rules = ()
    deny: _Rules = ()


class _SandboxTable(_Table, frozen=True):
    network: bool = False
    writable: Annotated[tuple[Annotated[str, Meta(min_length=1)], ...],
                        Meta(description="a list of directory paths")] = ()


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
    diagnostics: dict[str, Any] = {}
    """Checked by ``_diagnostics`` (its own messages name each server's table)."""


_MCP_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")


def load_config(paths: Paths | None = None) -> Config:
    """Read ``config.toml``; defaults when it does not exist."""
    path = (paths or Paths.from_env()).config_file
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
            raise ConfigError(f"{source}: [sandbox] writable: {w!r} is not an absolute path "
                              "(or ~/...)")
    agent = {name: getattr(doc.agent, name) for name in AgentTable.__struct_fields__}
    return Config(
        **agent, allow=tuple(PermissionRule.parse(v) for v in doc.permissions.allow),
        deny=tuple(PermissionRule.parse(v) for v in doc.permissions.deny),
        sandbox_network=doc.sandbox.network, sandbox_writable=writable,
        mcp_servers=_mcp_servers(doc.mcp.servers, source), notify=doc.tui.notify,
        hooks=parse_hooks_table(doc.hooks, f"{source}: [hooks]"), web_fetch=doc.web_fetch,
        diagnostics=_diagnostics(doc.diagnostics, source),
        source=source,
    )


def _mcp_servers(tables: dict[str, dict[str, Any]],
                 source: Path) -> tuple[McpServerConfig, ...]:
    out = []
    for name, raw in tables.items():
        where = f"{source}: [mcp.servers.{name}]"
        if not _MCP_NAME.fullmatch(name):
            raise ConfigError(f"{where}: the name may use only letters, digits, '_' and '-' "
                              "(at most 32)")
        table = convert_toml(raw, _McpServerTable, source, ConfigError, colon=False,
                             where=where)
        if (table.command is None) == (table.url is None):
            raise ConfigError(f"{where}: give either command (stdio) or url (streamable HTTP)")
        if table.url is not None and not table.url.startswith(("http://", "https://")):
            raise ConfigError(f"{where}: url must be an http:// or https:// URL")
        out.append(McpServerConfig(
            name=name, command=table.command, args=table.args,
            env=tuple(sorted(table.env.items())),
            cwd=Path(table.cwd).expanduser() if table.cwd else None, url=table.url,
            startup_timeout_s=table.startup_timeout_s, call_timeout_s=table.call_timeout_s))
    return tuple(out)


__all__ = [
    "DEGENERATE_MODES",
    "PERMISSION_MODES",
    "AgentTable",
    "Config",
    "ConfigError",
    "DegenerateMode",
    "DiagnosticsConfig",
    "LanguageServerConfig",
    "McpServerConfig",
    "PermissionMode",
    "PermissionRule",
    "WebFetchConfig",
    "load_config",
    "parse_config",
]
