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
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from engine.errors import UserError
from engine.paths import Paths
from engine.profiles import REASONING_EFFORTS

from .hook_specs import HookSpec, parse_hooks_table

PermissionMode = Literal["sandbox", "ask", "auto-edit", "full-auto", "plan"]
PERMISSION_MODES: tuple[PermissionMode, ...] = ("sandbox", "ask", "auto-edit", "full-auto",
                                                "plan")
DegenerateMode = Literal["stop", "warn", "off"]
DEGENERATE_MODES: tuple[DegenerateMode, ...] = ("stop", "warn", "off")
NotifyMode = Literal["off", "bell", "desktop", "both"]
NOTIFY_MODES: tuple[NotifyMode, ...] = ("off", "bell", "desktop", "both")


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


@dataclass(frozen=True)
class WebFetchConfig:
    """``[web_fetch]``: the tool is offered only when ``enabled``."""

    enabled: bool = False
    allow_private: bool = False
    """Also fetch loopback, private, link-local and reserved addresses."""
    max_bytes: int = 2_000_000
    timeout_s: float = 20.0


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


_DIAGNOSTICS_KEYS = {"enabled", "timeout_s", "max_items", "max_chars", "severity", "servers"}
_SERVER_KEYS = {"command", "args", "extensions", "language_id", "settings"}


def _diagnostics(table: dict[str, Any], source: Path) -> DiagnosticsConfig:
    where = f"{source}: [diagnostics]"
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


@dataclass(frozen=True)
class Config:
    """Everything ``config.toml`` can set; ``None`` means "use the profile's"."""

    permission_mode: PermissionMode | None = None
    """``None``: ``sandbox`` where bubblewrap works, else ``ask``."""
    reasoning_effort: str | None = None
    thinking_token_budget: int | None = None
    max_turns: int = 50
    bash_timeout_s: float = 120.0
    profile: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | Literal["random", "off"] = "random"
    """The session seed every request's ``seed`` is derived from (see
    :func:`sparkcode.agent.sampling.request_seed`)."""
    degenerate_streams: DegenerateMode = "stop"
    compact_threshold: float = 0.8
    """Share of ``max_model_len`` in use at which older turns are summarised."""
    image_max_mib: float = 5.0
    """Size cap per attached image (why 5: ``sparkcode.agent.images.DEFAULT_MAX_MIB``)."""
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
    web_fetch: WebFetchConfig = field(default_factory=lambda: WebFetchConfig())
    diagnostics: DiagnosticsConfig = field(default_factory=lambda: DiagnosticsConfig())
    source: Path | None = None


_AGENT_KEYS = {"permission_mode", "reasoning_effort", "thinking_token_budget", "max_turns",
               "bash_timeout_s", "profile", "temperature", "top_p", "seed",
               "degenerate_streams", "compact_threshold", "image_max_mib"}
_SECTIONS = {"agent": _AGENT_KEYS, "permissions": {"allow", "deny"},
             "sandbox": {"network", "writable"}, "mcp": {"servers"}, "tui": {"notify"},
             "web_fetch": {"enabled", "allow_private", "max_bytes", "timeout_s"},
             "hooks": set(), "diagnostics": _DIAGNOSTICS_KEYS}
_MCP_KEYS = {"command", "args", "env", "cwd", "url", "startup_timeout_s", "call_timeout_s"}
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
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: malformed TOML: {exc}") from None
    for section, table in doc.items():
        if section not in _SECTIONS:
            raise ConfigError(f"{source}: unknown section [{section}] "
                              f"(known: {', '.join(sorted(_SECTIONS))})")
        if not isinstance(table, dict):
            raise ConfigError(f"{source}: {section} must be a table")
        for key in table:
            if section != "hooks" and key not in _SECTIONS[section]:
                raise ConfigError(f"{source}: [{section}] unknown key {key!r} "
                                  f"(known: {', '.join(sorted(_SECTIONS[section]))})")
    agent: dict[str, Any] = doc.get("agent", {})
    perms: dict[str, Any] = doc.get("permissions", {})
    sandbox: dict[str, Any] = doc.get("sandbox", {})

    def fail(section: str, key: str, why: str) -> ConfigError:
        return ConfigError(f"{source}: [{section}] {key}: {why}")

    mode = agent.get("permission_mode")
    if mode is not None and mode not in PERMISSION_MODES:
        raise fail("agent", "permission_mode", f"must be one of {', '.join(PERMISSION_MODES)}")
    effort = agent.get("reasoning_effort")
    if effort is not None and effort not in REASONING_EFFORTS:
        raise fail("agent", "reasoning_effort", f"must be one of {', '.join(REASONING_EFFORTS)}")
    budget = agent.get("thinking_token_budget")
    if budget is not None and (not _is_int(budget) or budget < -1):
        raise fail("agent", "thinking_token_budget", "must be an integer >= -1 (-1 = unlimited)")
    max_turns = agent.get("max_turns", 50)
    if not _is_int(max_turns) or max_turns < 1:
        raise fail("agent", "max_turns", "must be a positive integer")
    timeout = agent.get("bash_timeout_s", 120.0)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise fail("agent", "bash_timeout_s", "must be a positive number of seconds")
    profile = agent.get("profile")
    if profile is not None and not isinstance(profile, str):
        raise fail("agent", "profile", "must be a string")
    degenerate = agent.get("degenerate_streams", "stop")
    if degenerate not in DEGENERATE_MODES:
        raise fail("agent", "degenerate_streams",
                   f"must be one of {', '.join(DEGENERATE_MODES)}")

    threshold = agent.get("compact_threshold", 0.8)
    if not _is_number(threshold) or not 0.1 <= threshold <= 0.95:
        raise fail("agent", "compact_threshold", "must be a number between 0.1 and 0.95 (the "
                   "share of the context window that compacts the history)")

    image_max = agent.get("image_max_mib", 5.0)
    if not _is_number(image_max) or not 0 < image_max <= 64:
        raise fail("agent", "image_max_mib", "must be a number of MiB in (0, 64] (the size "
                   "cap per attached image)")

    temperature = agent.get("temperature")
    if temperature is not None and (not _is_number(temperature) or not 0 <= temperature <= 2):
        raise fail("agent", "temperature", "must be a number between 0 and 2")
    top_p = agent.get("top_p")
    if top_p is not None and (not _is_number(top_p) or not 0 < top_p <= 1):
        raise fail("agent", "top_p", "must be a number in (0, 1]")
    seed = agent.get("seed", "random")
    if not (seed in ("random", "off") or (_is_int(seed) and 0 <= seed < 2**63)):
        raise fail("agent", "seed", 'must be "random", "off" or a non-negative integer')

    def rules(key: str) -> tuple[PermissionRule, ...]:
        value = perms.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise fail("permissions", key, "must be a list of 'tool' or 'tool:glob' strings")
        return tuple(PermissionRule.parse(v) for v in value)

    network = sandbox.get("network", False)
    if not isinstance(network, bool):
        raise fail("sandbox", "network", "must be true or false")
    writable = sandbox.get("writable", [])
    if not isinstance(writable, list) or not all(isinstance(w, str) and w for w in writable):
        raise fail("sandbox", "writable", "must be a list of directory paths")
    writable_paths = tuple(Path(w).expanduser() for w in writable)
    for w, p in zip(writable, writable_paths, strict=True):
        if not p.is_absolute():
            raise fail("sandbox", "writable", f"{w!r} is not an absolute path (or ~/...)")

    servers = _mcp_servers(doc.get("mcp", {}).get("servers", {}), source)
    notify = doc.get("tui", {}).get("notify", "both")
    if notify not in NOTIFY_MODES:
        raise fail("tui", "notify", f"must be one of {', '.join(NOTIFY_MODES)}")

    hooks = parse_hooks_table(doc.get("hooks", {}), f"{source}: [hooks]")
    return Config(
        hooks=hooks, web_fetch=_web_fetch(doc.get("web_fetch", {}), source),
        diagnostics=_diagnostics(doc.get("diagnostics", {}), source),
        permission_mode=cast("PermissionMode | None", mode), reasoning_effort=effort,
        thinking_token_budget=budget, max_turns=max_turns, bash_timeout_s=float(timeout),
        profile=profile, temperature=float(temperature) if temperature is not None else None,
        top_p=float(top_p) if top_p is not None else None, seed=seed,
        degenerate_streams=cast(DegenerateMode, degenerate),
        compact_threshold=float(threshold), image_max_mib=float(image_max),
        allow=rules("allow"), deny=rules("deny"), sandbox_network=network,
        sandbox_writable=writable_paths, mcp_servers=servers,
        notify=cast(NotifyMode, notify), source=source,
    )


def _mcp_servers(tables: Any, source: Path) -> tuple[McpServerConfig, ...]:
    if not isinstance(tables, dict):
        raise ConfigError(f"{source}: [mcp] servers must be tables [mcp.servers.NAME]")
    out = []
    for name, table in tables.items():
        where = f"{source}: [mcp.servers.{name}]"
        if not _MCP_NAME.fullmatch(name):
            raise ConfigError(f"{where}: the name may use only letters, digits, '_' and '-' "
                              "(at most 32)")
        if not isinstance(table, dict):
            raise ConfigError(f"{where} must be a table")
        unknown = set(table) - _MCP_KEYS
        if unknown:
            raise ConfigError(f"{where}: unknown key {sorted(unknown)[0]!r} "
                              f"(known: {', '.join(sorted(_MCP_KEYS))})")
        command, url = table.get("command"), table.get("url")
        if (command is None) == (url is None):
            raise ConfigError(f"{where}: give either command (stdio) or url (streamable HTTP)")
        if command is not None and (not isinstance(command, str) or not command):
            raise ConfigError(f"{where}: command must be a non-empty string")
        if url is not None and (not isinstance(url, str)
                                or not url.startswith(("http://", "https://"))):
            raise ConfigError(f"{where}: url must be an http:// or https:// URL")
        args = table.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ConfigError(f"{where}: args must be a list of strings")
        env = table.get("env", {})
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise ConfigError(f"{where}: env must be a table of strings")
        cwd = table.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise ConfigError(f"{where}: cwd must be a path")
        timeouts = {}
        for key in ("startup_timeout_s", "call_timeout_s"):
            value = table.get(key, 30.0 if key == "startup_timeout_s" else 120.0)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigError(f"{where}: {key} must be a positive number of seconds")
            timeouts[key] = float(value)
        out.append(McpServerConfig(
            name=name, command=command, args=tuple(args), env=tuple(sorted(env.items())),
            cwd=Path(cwd).expanduser() if cwd else None, url=url, **timeouts))
    return tuple(out)


def _web_fetch(table: dict[str, Any], source: Path) -> WebFetchConfig:
    where = f"{source}: [web_fetch]"
    for key in ("enabled", "allow_private"):
        if not isinstance(table.get(key, False), bool):
            raise ConfigError(f"{where} {key}: must be true or false")
    max_bytes = table.get("max_bytes", 2_000_000)
    if not _is_int(max_bytes) or max_bytes < 1024:
        raise ConfigError(f"{where} max_bytes: must be an integer of at least 1024")
    timeout = table.get("timeout_s", 20.0)
    if not _is_number(timeout) or timeout <= 0:
        raise ConfigError(f"{where} timeout_s: must be a positive number of seconds")
    return WebFetchConfig(enabled=table.get("enabled", False),
                          allow_private=table.get("allow_private", False),
                          max_bytes=max_bytes, timeout_s=float(timeout))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


__all__ = [
    "PERMISSION_MODES",
    "Config",
    "ConfigError",
    "DiagnosticsConfig",
    "LanguageServerConfig",
    "McpServerConfig",
    "PermissionMode",
    "PermissionRule",
    "WebFetchConfig",
    "load_config",
    "parse_config",
]
