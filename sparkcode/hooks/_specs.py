"""Hook declarations: what runs on which agent event, read from three places.

Claude Code's hook format, where it fits (code.claude.com/docs/en/hooks):

- ``config.toml`` (the user's, always trusted)::

      [[hooks.PostToolUse]]
      matcher = "edit_file|write_file|multi_edit"   # a regex on the tool name
      command = "ruff format \\"$(jq -r .tool_input.path)\\""
      timeout_s = 30                                # default 60

- ``.sparkcode/hooks.toml`` in the project: the same tables without the
  ``hooks.`` prefix (``[[PostToolUse]]``);
- ``.claude/settings.json`` in the project: Claude Code's ``hooks`` object,
  ``{"PostToolUse": [{"matcher": "Edit|Write", "hooks": [{"type": "command",
  "command": "...", "timeout": 30}]}]}``.

Project hooks run only once the user trusts the project (:class:`~sparkcode.hooks.TrustStore`).
A matcher is matched whole (``re.fullmatch``) against sparkcode's tool name and
Claude Code's name for the same tool (``edit_file`` is also ``Edit``), so a
``.claude/settings.json`` written for Claude Code works unchanged; an empty
matcher or ``*`` matches every tool. This module only reads and checks; running
is :mod:`sparkcode.agent.extensions.hooks`.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import msgspec

from engine.errors import UserError
from engine.profiles import convert_toml

HookEvent = Literal["PreToolUse", "PostToolUse", "UserPromptSubmit", "Stop", "SessionStart"]
HOOK_EVENTS: tuple[HookEvent, ...] = (
    "PreToolUse",
    "PostToolUse",
    "UserPromptSubmit",
    "Stop",
    "SessionStart",
)
TOOL_EVENTS: tuple[HookEvent, ...] = ("PreToolUse", "PostToolUse")
"""The events whose matcher names a tool (the others ignore it)."""
DEFAULT_TIMEOUT_S = 60.0
"""Claude Code's default: a formatter or a test run fits, a hang is not forever."""
PROJECT_HOOK_FILES: tuple[str, ...] = (".sparkcode/hooks.toml", ".claude/settings.json")

CLAUDE_TOOL_NAMES: dict[str, str] = {
    "bash": "Bash",
    "read_file": "Read",
    "write_file": "Write",
    "edit_file": "Edit",
    "multi_edit": "MultiEdit",
    "grep": "Grep",
    "list_files": "Glob",
    "todo": "TodoWrite",
    "web_fetch": "WebFetch",
    "skill": "Skill",
    "job_output": "BashOutput",
    "job_stop": "KillShell",
}
"""Claude Code's name for each sparkcode tool, so its matchers (``Edit|Write``) fit."""


class _Entry(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One ``[[hooks.EVENT]]`` table (checked further by :func:`_spec`, which
    Claude Code's JSON hooks share)."""

    command: str = ""
    matcher: str = ""
    timeout_s: float = DEFAULT_TIMEOUT_S


class HookConfigError(UserError):
    """A hook declaration is malformed; the message names the file and the entry."""


@dataclass(frozen=True)
class HookSpec:
    """One command run on one event (for the tools its matcher names)."""

    event: HookEvent
    command: str
    matcher: str = ""
    timeout_s: float = DEFAULT_TIMEOUT_S
    source: str = "config"
    """Where it was declared, as shown to the user (``config.toml``, a project file)."""

    def matches(self, tool: str | None) -> bool:
        """Whether this hook runs for ``tool`` (always for non-tool events)."""
        if self.event not in TOOL_EVENTS or self.matcher in ("", "*"):
            return True
        if tool is None:
            return False
        names = (tool, CLAUDE_TOOL_NAMES.get(tool, tool))
        return any(re.fullmatch(self.matcher, name) for name in names)


def parse_hooks_table(doc: Any, where: str) -> tuple[HookSpec, ...]:
    """``{"PostToolUse": [{"matcher": ..., "command": ...}], ...}`` from TOML."""
    if not isinstance(doc, dict):
        raise HookConfigError(f"{where}: hooks must be tables such as [[hooks.PostToolUse]]")
    out: list[HookSpec] = []
    for event, entries in doc.items():
        name = _event(event, where)
        if not isinstance(entries, list):
            raise HookConfigError(
                f"{where}: {event} must be an array of tables ([[{event}]] entries)"
            )
        for i, entry in enumerate(entries):
            here = f"{where}: {event}[{i}]"
            if not isinstance(entry, dict):
                raise HookConfigError(f"{here} must be a table with a command")
            spec = convert_toml(
                entry, _Entry, Path(where), HookConfigError, colon=False, where=here
            )
            out.append(_spec(name, spec.command, spec.matcher, spec.timeout_s, here, where))
    return tuple(out)


def parse_claude_hooks(doc: Any, where: str) -> tuple[HookSpec, ...]:
    """Claude Code's ``hooks`` object (matcher groups of ``command`` hooks);
    hook types other than ``command`` (``http``, ``prompt``) are refused by name."""
    if not isinstance(doc, dict):
        raise HookConfigError(f'{where}: "hooks" must be an object of events')
    out: list[HookSpec] = []
    for event, groups in doc.items():
        name = _event(event, where)
        if not isinstance(groups, list):
            raise HookConfigError(f"{where}: hooks.{event} must be a list of matcher groups")
        for i, group in enumerate(groups):
            here = f"{where}: hooks.{event}[{i}]"
            if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
                raise HookConfigError(f'{here} must be {{"matcher": ..., "hooks": [...]}}')
            for j, hook in enumerate(group["hooks"]):
                at = f"{here}.hooks[{j}]"
                if not isinstance(hook, dict) or hook.get("type", "command") != "command":
                    kind = hook.get("type") if isinstance(hook, dict) else None
                    raise HookConfigError(
                        f'{at}: only "type": "command" hooks are supported (got {kind!r})'
                    )
                out.append(
                    _spec(
                        name,
                        hook.get("command"),
                        group.get("matcher", ""),
                        hook.get("timeout", DEFAULT_TIMEOUT_S),
                        at,
                        where,
                    )
                )
    return tuple(out)


def project_hooks(workspace: Path) -> tuple[HookSpec, ...]:
    """The hooks the project declares (not yet trusted: see
    :class:`~sparkcode.hooks.TrustStore`)."""
    out: list[HookSpec] = []
    for rel in PROJECT_HOOK_FILES:
        path = workspace / rel
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise HookConfigError(f"{path}: cannot read it ({exc})") from None
        if rel.endswith(".toml"):
            try:
                doc: Any = tomllib.loads(text)
            except tomllib.TOMLDecodeError as exc:
                raise HookConfigError(f"{path}: malformed TOML: {exc}") from None
            out += parse_hooks_table(doc, rel)
            continue
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise HookConfigError(f"{path}: malformed JSON: {exc}") from None
        if isinstance(doc, dict) and "hooks" in doc:
            out += parse_claude_hooks(doc["hooks"], rel)
    return tuple(out)


def _event(event: object, where: str) -> HookEvent:
    if event not in HOOK_EVENTS:
        raise HookConfigError(
            f"{where}: unknown hook event {event!r} (known: {', '.join(HOOK_EVENTS)})"
        )
    return event


def _spec(
    event: HookEvent, command: object, matcher: object, timeout: object, here: str, source: str
) -> HookSpec:
    if not isinstance(command, str) or not command.strip():
        raise HookConfigError(f"{here}: command must be a non-empty string")
    if not isinstance(matcher, str):
        raise HookConfigError(f"{here}: matcher must be a string (a regex on tool names)")
    try:
        re.compile(matcher)
    except re.error as exc:
        raise HookConfigError(f"{here}: matcher {matcher!r} is not a valid regex: {exc}") from None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise HookConfigError(f"{here}: the timeout must be a positive number of seconds")
    return HookSpec(
        event=event, command=command, matcher=matcher, timeout_s=float(timeout), source=source
    )


__all__ = [
    "CLAUDE_TOOL_NAMES",
    "DEFAULT_TIMEOUT_S",
    "HOOK_EVENTS",
    "PROJECT_HOOK_FILES",
    "HookConfigError",
    "HookEvent",
    "HookSpec",
    "parse_claude_hooks",
    "parse_hooks_table",
    "project_hooks",
]
