"""The one session builder: from what the user asked for to a ready agent.

The TUI (:mod:`sparkcode.tui.launch`), ``sparkcode run`` and the replay's
resume path all start a session here, so a setting lands in one place:

1. :func:`resolve_target` reads ``config.toml`` and the profile once per start
   (the TUI's engine panel and the agent share the result): a
   :class:`StartTarget` whose ``target`` is the :class:`~sparkcode.target.Target`.
2. :func:`build_session` resolves the connection (``/v1/models``, the managed
   engine started when allowed), starts the recording, starts the MCP servers
   of ``config.toml`` and assembles the agent: client, settings, permissions,
   tools (built-in, then MCP), undo store, metrics, system prompt.

Adding a setting: a field of :class:`~engine.profiles.AgentKnobs` (a profile,
``config.toml`` and a start can then all say it) and its default in
:class:`~sparkcode.agent.AgentSettings`; :func:`session_settings` lays the three over
the defaults (docs/architecture.md, "Adding a setting").
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import httpx

from engine.errors import UserError
from engine.paths import Paths
from engine.profiles import AgentKnobs, check_knobs, default_profile_name, load_profile, overlay

from ..agent import (
    DEFAULT_SYSTEM_PROMPT,
    Agent,
    AgentSettings,
    Approver,
    MetricsPoller,
    Permissions,
    UndoStore,
    require_git,
)
from ..agent.core.settings import settings_from
from ..agent.extensions.instructions import Instructions, load_instructions
from ..agent.extensions.mcp_tools import McpHub
from ..agent.extensions.skills import load_skills, skill_tools
from ..agent.lsp import Diagnostics, navigation_tools
from ..agent.tools import Tool, WebFetch, default_tools
from ..agent.wire.sampling import new_session_seed
from ..config import Config, PermissionMode, load_config
from ..custom_commands import CustomCommands, load_commands
from ..hooks.session import AskTrust, session_hooks
from ..replay import Rebuilt
from ..sessions import SessionRecorder, event_recorder, start_recording
from ..target import Progress, Reuse, Target
from ..worktree import Worktree, find_worktree
from ._connection import Connection, budget_to_send, connect


@dataclass(frozen=True)
class StartTarget:
    """One start, resolved once: the workspace, ``config.toml``, the :class:`Target`
    it talks to and what the workspace brings."""

    workspace: Path
    """Resolved; an existing directory."""
    config: Config
    target: Target
    """What this start talks to, as every front names it (:mod:`sparkcode.target`): the
    endpoint, or the profile (a named one uses only an engine of its own, else any
    running engine)."""
    instructions: Instructions = field(default_factory=Instructions)
    """AGENTS.md / CLAUDE.md, read once at start
    (:mod:`sparkcode.agent.extensions.instructions`)."""
    commands: CustomCommands = field(default_factory=CustomCommands)
    """The custom slash commands (:mod:`sparkcode.custom_commands`), read once at start."""
    vision: bool = False
    """The model takes images: the profile's ``vision``, or ``--vision`` with
    ``--endpoint`` (a server sparkcode cannot ask)."""
    worktree: Worktree | None = None
    """The sparkcode worktree the workspace is in (``--worktree``, or a resumed session
    recorded in one: :mod:`sparkcode.worktree`); recorded in the session header."""


def resolve_target(
    workspace: Path,
    paths: Paths,
    *,
    profile: str | None = None,
    endpoint: str | None = None,
    model: str | None = None,
    api_key_env: str | None = None,
    vision: bool = False,
    config: Config | None = None,
    worktree: Worktree | None = None,
) -> StartTarget:
    """Check the workspace, read ``config.toml`` and load the profile (once).

    ``worktree``: the one ``--worktree`` opened (its ``workspace`` is ``workspace``);
    without it a workspace inside a sparkcode worktree is found as one."""
    root = workspace.expanduser().resolve()
    if not root.is_dir():
        raise UserError(f"workspace {root} is not a directory")
    worktree = worktree if worktree is not None else find_worktree(root)
    if endpoint and profile:
        raise UserError("--endpoint and --profile exclude each other; pass one")
    if vision and not endpoint:
        raise UserError(
            "--vision is for --endpoint; a profile says it in its [model] table (vision = true)"
        )
    config = config if config is not None else load_config(paths)
    instructions = load_instructions(root)
    commands = load_commands(root, paths.config_dir / "commands")
    if endpoint:
        target = Target.for_endpoint(endpoint, model, api_key_env)
    else:
        spec = load_profile(profile or config.profile or default_profile_name(paths), paths)
        target = Target.for_profile(
            spec,
            paths,
            model=model,
            api_key_env=api_key_env,
            reuse=Reuse.SAME_PROFILE if profile is not None else Reuse.ANY,
        )
        vision = spec.vision
    return StartTarget(
        root,
        config,
        target,
        instructions=instructions,
        commands=commands,
        vision=vision,
        worktree=worktree,
    )


@dataclass(frozen=True)
class SessionOptions:
    """Per-start choices; ``None`` means the profile's or ``config.toml``'s value."""

    origin: str = "agent"
    """Recorded in the session header: ``tui``, ``run``..."""
    record: bool = True
    permission_mode: PermissionMode | None = None
    approver: Approver | None = None
    """Answers approvals instead of the consumer (headless runs)."""
    knobs: AgentKnobs = AgentKnobs()
    """The agent's settings this start says (the ``run`` command's flags...), over
    ``config.toml``'s and the profile's; checked as those files are."""
    seed: int | Literal["random", "off"] | None = None
    """The session seed (``--seed``); None: ``config.toml``'s."""
    force_tool: str | None = None
    force_tool_parameters: dict[str, Any] | None = None
    resume: Rebuilt | None = None
    """Continue this recorded conversation (a new recording names it as parent)."""
    start_engine: bool = True
    """Boot the managed engine when it is not running (the TUI's panel does it itself)."""
    progress: Progress | None = None
    transport: httpx.AsyncBaseTransport | None = None
    """What requests go out through, under the recorder (tests pass a scripted server)."""
    mcp: bool = True
    """Start the MCP servers of ``config.toml``."""
    trust_project: bool | None = None
    """Run the project's hooks: True trusts the project (remembered), False does not,
    None asks ``ask_trust`` unless it was trusted before (:mod:`sparkcode.hooks.session`)."""
    ask_trust: AskTrust | None = None
    session_id: str | None = None
    """The recording's ID (default: a new one); ``sparkcode acp`` names it before the
    engine is up, so the editor has it at once."""


@dataclass
class AgentSession:
    """A built session: the agent and what it was built from."""

    agent: Agent
    target: StartTarget
    connection: Connection
    recorder: SessionRecorder | None = None
    mcp: McpHub | None = None
    """The MCP servers that started (their tools are in the agent's registry)."""
    notes: list[str] = field(default_factory=list)
    """Things to tell the user once at start (shown by the TUI, printed by run)."""
    diagnostics: Diagnostics | None = None
    """The language servers that check edits (started at the first edit, closed here)."""

    @property
    def session_id(self) -> str | None:
        return self.recorder.session_id if self.recorder is not None else None

    async def aclose(self) -> None:
        await self.agent.jobs.aclose()  # background jobs end with the session
        await self.agent.client.aclose()
        if self.mcp is not None:
            await self.mcp.aclose()
        if self.diagnostics is not None:
            await self.diagnostics.aclose()
        if self.agent.permissions.sandbox is not None:
            self.agent.permissions.sandbox.cleanup()  # the session's private /tmp
        if self.recorder is not None:
            self.recorder.close()


async def build_session(target: StartTarget, options: SessionOptions, paths: Paths) -> AgentSession:
    """Connect, start recording and assemble the agent for ``target``."""
    require_git()  # before an engine starts for a session that could not run
    conn = await connect(
        target.target,
        paths,
        start_engine=options.start_engine,
        progress=options.progress,
        transport=options.transport,
    )
    settings = replace(session_settings(target.config, conn, options), vision=target.vision)
    resume = options.resume
    permissions = Permissions(target.config, mode=options.permission_mode)
    extra: dict[str, Any] = {
        "permission_mode": permissions.mode,
        "sampling": {
            "seed": settings.seed,
            "temperature": settings.temperature,
            "top_p": settings.top_p,
        },
    }
    if resume is not None:
        extra.update(parent=resume.session_id, parent_turn=resume.turns)
    if target.worktree is not None:
        extra["worktree"] = target.worktree.to_json()  # `sessions list` shows it
    recorder = transport = None
    if options.record:
        recorder, transport = start_recording(
            conn.base_url,
            workspace=target.workspace,
            model=conn.model,
            paths=paths,
            api_key_env=conn.api_key_env,
            origin=options.origin,
            extra=extra,
            inner=options.transport,
            session_id=options.session_id,
        )
    client = conn.client(transport or options.transport)
    # Skills are listed once, sorted: the list is part of the byte-stable prefix.
    skills = load_skills(target.workspace, paths.config_dir / "skills")
    prompt = target.instructions.system_prompt(DEFAULT_SYSTEM_PROMPT) + skills.prompt_section()
    notes = [
        *(target.worktree.notes if target.worktree else ()),
        *target.instructions.notes,
        *skills.notes,
        *target.commands.notes,
    ]
    if permissions.notice:
        notes.append(permissions.notice)
    hub = None
    if options.mcp and target.config.mcp_servers:
        # Listed once here: the tool list is part of the prompt prefix.
        hub = await McpHub.start(target.config.mcp_servers, paths.state_dir / "mcp")
        notes += hub.failures
    hooks, hook_notes = await session_hooks(
        target.workspace,
        target.config.hooks,
        paths,
        trust=options.trust_project,
        ask=options.ask_trust,
        session_id=recorder.session_id if recorder else None,
        transcript=recorder.path if recorder else None,
    )
    notes += hook_notes
    diagnostics = (
        Diagnostics(target.config.diagnostics, target.workspace)
        if target.config.diagnostics.enabled
        else None
    )
    agent = Agent(
        client,
        target.workspace,
        settings=settings,
        hooks=hooks,
        permissions=permissions,
        tools=default_tools(
            [*skill_tools(skills), *_web_tools(target.config), *(hub.tools if hub else [])],
            task=bool(settings.task_tool),
            only=settings.tools or None,
            navigation=navigation_tools(diagnostics),
        ),
        undo=UndoStore(target.workspace, paths.data_dir),
        metrics=MetricsPoller(client.fetch_metrics),
        approver=options.approver,
        system_prompt=prompt,
        checker=diagnostics,
    )
    if resume is not None:
        # The recorded history, system prompt included, byte for byte: the first
        # request repeats the recorded prefix and the engine's prefix cache hits.
        agent.history = [dict(m) for m in resume.history]
        agent.effort_pinned = resume.reasoning_effort  # the recorded prompts' (effort.py)
        agent.turns = resume.turns
        agent.rewind.marks = [replace(m) for m in resume.marks]
        agent.todos.items = resume.todos  # the plan carries over with the conversation
        agent.pending_context = list(resume.pending_context)  # an unsent !cmd's output
        notes += resume.notes
        if resume.system_prompt != prompt:
            notes.append(
                "the system prompt (sparkcode's or the project instructions) changed "
                "since this session was recorded; the resumed session keeps the "
                "recorded one (start a new session to use the new one)"
            )
    if recorder is not None:
        agent.subscribe(event_recorder(recorder))
    return AgentSession(
        agent=agent,
        target=target,
        connection=conn,
        recorder=recorder,
        mcp=hub,
        notes=notes,
        diagnostics=diagnostics,
    )


def session_settings(config: Config, conn: Connection, options: SessionOptions) -> AgentSettings:
    """The one overlay: the profile's knobs, then ``config.toml``'s, then this
    start's, over :class:`AgentSettings`' defaults."""
    profile = conn.profile_spec.agent if conn.profile_spec is not None else AgentKnobs()
    started = check_knobs(options.knobs, "the settings given for this start:")
    settings = settings_from(
        overlay(profile, config, started),
        seed=session_seed(config.seed if options.seed is None else options.seed),
        force_tool=options.force_tool,
        force_tool_parameters=options.force_tool_parameters,
        context_limit=conn.max_model_len,
    )
    if started.thinking_token_budget is None:
        # A budget given for this start is sent as given; the files' one only
        # where the engine can honour it.
        settings.thinking_token_budget = budget_to_send(
            conn.profile_spec, conn.managed, settings.thinking_token_budget
        )
    return settings


def _web_tools(config: Config) -> list[Tool]:
    """``web_fetch`` when ``config.toml`` enables it (off by default)."""
    return [WebFetch(config.web_fetch)] if config.web_fetch.enabled else []


def session_seed(setting: int | Literal["random", "off"]) -> int | None:
    """The session seed for a ``seed`` setting (``config.toml`` [agent] or ``--seed``)."""
    if setting == "off":
        return None
    if setting == "random":
        return new_session_seed()
    return setting


__all__ = [
    "AgentSession",
    "SessionOptions",
    "StartTarget",
    "build_session",
    "resolve_target",
    "session_seed",
    "session_settings",
]
