"""Who decides whether a tool call runs: config rules, then the permission mode.

Order: a matching ``deny`` rule refuses; in ``plan`` mode anything that is not
read-only is refused; a matching ``allow`` rule (or an "always" answer earlier
in the session) allows; read-only calls are allowed; then the mode decides:

- ``sandbox``: shell commands run without approval inside the bubblewrap
  sandbox (one that asks for ``sandbox: false`` asks); file edits, which the
  tools confine to the workspace, run; commits and MCP tools ask.
- ``ask``: every edit, commit, MCP tool and non-read-only shell command asks.
- ``auto-edit``: edits run; shell, commits and MCP tools ask.
- ``full-auto``: everything runs, shell commands outside any sandbox.
- ``plan``: only read-only tools (and the todo list) run.

Without a mode, ``sandbox`` is used where bubblewrap works and ``ask``
elsewhere, with :attr:`Permissions.notice` saying why.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sparkcode.config import Config, PermissionMode

from ..tools import BwrapStatus, Sandbox, Tool, find_bwrap
from .settings import PLAN_NOTE

Verdict = Literal["allow", "ask", "deny"]
PLAN_REFUSAL = (
    "plan mode: only read-only tools run, and this call would change something. "
    "Do not retry it: finish investigating, record the steps with the todo tool "
    "and answer with the plan; the user switches to act mode to carry it out"
)


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    by: Literal["rule", "mode"]
    reason: str = ""
    sandboxed: bool = False
    """Run it inside the sandbox (shell commands in modes sandbox and plan)."""


def rule_subject(tool: str, args: dict[str, Any]) -> str:
    """What a rule's glob is matched against for this call."""
    if tool == "bash":
        return str(args.get("command", ""))
    if tool == "git_commit":
        return str(args.get("message", ""))
    if tool.startswith("mcp__"):
        return json.dumps(args, ensure_ascii=False, sort_keys=True)
    return str(args.get("path", args.get("pattern", "")))


class Permissions:
    """The session's permission state: mode, config rules, "always" answers."""

    def __init__(
        self,
        config: Config,
        mode: PermissionMode | None = None,
        *,
        bwrap: BwrapStatus | None = None,
    ) -> None:
        self.config = config
        status = bwrap if bwrap is not None else find_bwrap()
        self.sandbox: Sandbox | None = None
        if status.path is not None:
            self.sandbox = Sandbox(
                status.path, network=config.sandbox_network, writable=config.sandbox_writable
            )
        self._unavailable = status.reason
        self.notice: str | None = None
        """Why the mode is not the one asked for (no sandbox here), to show once."""
        self.mode: PermissionMode = "ask"
        self.set_mode(mode or config.permission_mode)
        self.always: set[str] = set()
        """Tools the user allowed for the rest of the session."""
        self.refusal = PLAN_REFUSAL
        """The result of a call that plan mode refuses."""
        self.plan_note = PLAN_NOTE
        """Appended to the user's message in plan mode (the system prompt stays)."""

    def read_only(self, refusal: str, note: str) -> Permissions:
        """These rules held to plan mode's read-only rule, refusing with ``refusal``
        and saying ``note`` after the user's message: for the ``task`` tool's
        sub-conversation. The config's rules and the sandbox are shared; the
        "always" answers do not apply (plan mode comes first)."""
        view = copy.copy(self)
        view.mode, view.refusal, view.plan_note = "plan", refusal, note
        view.notice, view.always = None, set()
        return view

    def set_mode(self, mode: PermissionMode | None) -> str | None:
        """Switch mode (``None`` = the default here); returns the notice when
        ``sandbox`` is not available and ``ask`` is used instead."""
        self.notice = None
        if mode is None:
            mode = "sandbox"
        if mode == "sandbox" and self.sandbox is None:
            mode = "ask"
            self.notice = (
                f"shell commands ask for approval (mode ask): the sandbox mode "
                f"needs bubblewrap, and {self._unavailable}"
            )
        self.mode = mode
        return self.notice

    def decide(self, tool: Tool, args: dict[str, Any], workspace: Path) -> Decision:
        subject = rule_subject(tool.name, args)
        for rule in self.config.deny:
            if rule.matches(tool.name, subject):
                return Decision("deny", "rule", f"denied by rule '{rule}' in config.toml")
        read_only = tool.is_read_only(args, workspace)
        shell = tool.kind == "shell"
        if self.mode == "plan":
            if read_only:
                return Decision(
                    "allow",
                    "mode",
                    "read-only (plan mode)",
                    sandboxed=shell and self.sandbox is not None,
                )
            return Decision("deny", "mode", self.refusal)
        for rule in self.config.allow:
            if rule.matches(tool.name, subject):
                return Decision("allow", "rule", f"allowed by rule '{rule}'")
        if tool.name in self.always:
            return Decision("allow", "rule", "allowed for this session")
        if self.mode == "sandbox" and shell and args.get("sandbox") is not False:
            return Decision("allow", "mode", "sandbox", sandboxed=True)
        if read_only:
            return Decision("allow", "mode", "read-only")
        if self.mode == "full-auto":
            return Decision("allow", "mode", "full-auto")
        if self.mode in ("auto-edit", "sandbox") and tool.kind == "edit":
            return Decision("allow", "mode", self.mode)
        if shell and self.mode == "sandbox":
            return Decision("ask", "mode", "outside the sandbox")
        return Decision("ask", "mode", self.mode)
