"""``config.toml``'s ``[diagnostics]``: language-server diagnostics after edits
(:mod:`sparkcode.agent.lsp`; docs/agent.md, Diagnostics), declared as msgspec structs.

``DiagnosticsConfig`` is what a session uses: the table's knobs (declared once, in
``_DiagnosticsKnobs``) and its servers, the built-in Python one first.
``_config.py`` reads the file; the package re-exports these names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from msgspec import Meta

from engine.profiles import TomlTable

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
    name="python",
    command="basedpyright-langserver",
    args=("--stdio",),
    extensions=(".py", ".pyi"),
    language_id="python",
    settings={"basedpyright": {"analysis": {"typeCheckingMode": "standard"}}},
)
"""The built-in server: basedpyright, a dependency that brings its own Node. Its own
default mode ("recommended") also flags style (reportAny, reportUnusedCallResult: a
warning on every bare call); "standard" is pyright's default, type errors. A project's
pyrightconfig.json or ``[tool.basedpyright]`` still wins."""


class LanguageServerTable(TomlTable, frozen=True, kw_only=True):
    """``[diagnostics.servers.NAME]`` as written (its name is the table's)."""

    command: Annotated[
        str,
        Meta(
            pattern=r"\S",
            description=("a non-empty string (the server's program; its arguments go in args)"),
        ),
    ]
    args: tuple[str, ...] = ()
    extensions: Annotated[
        tuple[Annotated[str, Meta(pattern=r"^\..")], ...],
        Meta(min_length=1, description='a non-empty list like [".rs"]'),
    ]
    language_id: Annotated[str, Meta(min_length=1, description="a non-empty string")] | None = None
    settings: dict[str, Any] = {}

    def server(self, name: str) -> LanguageServerConfig:
        return LanguageServerConfig(
            name=name,
            command=self.command,
            args=self.args,
            extensions=self.extensions,
            language_id=self.language_id or name,
            settings=self.settings,
        )


class _DiagnosticsKnobs(TomlTable, frozen=True, kw_only=True):
    enabled: bool = True
    timeout_s: Annotated[
        float, Meta(gt=0, le=120, description=("a number of seconds in (0, 120]"))
    ] = 4.0
    """The longest one edit waits for a running server. A warm basedpyright answered an
    edit of a small file (two analyses: before and after) in 0.3-1.2 s here, 2 cores at
    load 5-10; 4 s is three times the slow end and short beside a model's turn. A
    server's first answer may take longer (``sparkcode.agent.lsp.STARTUP_S``)."""
    max_items: Annotated[int, Meta(ge=1, description="an integer of at least 1")] = 10
    """New problems listed per edit; the rest are counted."""
    max_chars: Annotated[int, Meta(ge=200, description="an integer of at least 200")] = 2000
    """Characters of the listing at most (a long type message is cut)."""
    severity: Severity = "error"
    """The least severe problem listed."""


class DiagnosticsTable(_DiagnosticsKnobs, frozen=True, kw_only=True):
    """``[diagnostics]`` as written."""

    servers: Annotated[
        dict[str, dict[str, Any]], Meta(description="tables [diagnostics.servers.NAME]")
    ] = {}
    """Each held to :class:`LanguageServerTable` on its own, so that its messages
    name its table."""


class DiagnosticsConfig(_DiagnosticsKnobs, frozen=True, kw_only=True):
    """``[diagnostics]``: what an edit's result says about the problems it introduced."""

    servers: tuple[LanguageServerConfig, ...] = (PYTHON_SERVER,)
    """The built-in Python server, replaced or joined by ``[diagnostics.servers.NAME]``."""
