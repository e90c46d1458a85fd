"""Who decides whether a tool call runs: config rules, then the permission mode.

Order: a matching ``deny`` rule refuses; a matching ``allow`` rule (or an
"always" answer earlier in the session) allows; read-only calls are allowed;
then the mode decides: ``ask`` asks for every edit, commit and non-read-only
shell command, ``auto-edit`` allows edits but asks for shell and commits,
``full-auto`` allows everything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from sparkcode.config import Config, PermissionMode

from .tools import Tool

Verdict = Literal["allow", "ask", "deny"]


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    by: Literal["rule", "mode"]
    reason: str = ""


def rule_subject(tool: str, args: dict[str, Any]) -> str:
    """What a rule's glob is matched against for this call."""
    if tool == "bash":
        return str(args.get("command", ""))
    if tool == "git_commit":
        return str(args.get("message", ""))
    return str(args.get("path", args.get("pattern", "")))


class Permissions:
    """The session's permission state: mode, config rules, "always" answers."""

    def __init__(self, config: Config, mode: PermissionMode | None = None) -> None:
        self.config = config
        self.mode: PermissionMode = mode or config.permission_mode
        self.always: set[str] = set()
        """Tools the user allowed for the rest of the session."""

    def decide(self, tool: Tool, args: dict[str, Any]) -> Decision:
        subject = rule_subject(tool.name, args)
        for rule in self.config.deny:
            if rule.matches(tool.name, subject):
                return Decision("deny", "rule", f"denied by rule '{rule}' in config.toml")
        for rule in self.config.allow:
            if rule.matches(tool.name, subject):
                return Decision("allow", "rule", f"allowed by rule '{rule}'")
        if tool.name in self.always:
            return Decision("allow", "rule", "allowed for this session")
        if tool.is_read_only(args):
            return Decision("allow", "mode", "read-only")
        if self.mode == "full-auto":
            return Decision("allow", "mode", "full-auto")
        if self.mode == "auto-edit" and tool.kind == "edit":
            return Decision("allow", "mode", "auto-edit")
        return Decision("ask", "mode", self.mode)
