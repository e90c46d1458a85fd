"""The ACP agent: ``initialize``, sessions by ID, and the requests that reach them.

Each ``session/new`` resolves its own start target (the editor's ``cwd`` is the
workspace; ``config.toml`` and the profile are read as ``sparkcode run`` reads
them) with the editor's MCP servers added to ``config.toml``'s. The ACP session
ID is the recording's ID, so ``session/load`` of an ID the editor kept finds
the recording; turns after a load are recorded as a new session naming the old
one as parent, and a later load follows that chain to its newest recording. The
session mode is recorded (the header's ``permission_mode``, then each
``ModeChanged``), so a load gets back the mode the session was left in.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import msgspec
from acp import PROTOCOL_VERSION, Client, RequestError
from acp.schema import (
    AcpMcpServer,
    AgentCapabilities,
    HttpMcpServer,
    Implementation,
    InitializeResponse,
    LoadSessionResponse,
    McpCapabilities,
    McpServerStdio,
    NewSessionResponse,
    PromptCapabilities,
    PromptResponse,
    SetSessionModeResponse,
    SseMcpServer,
)

from engine.errors import UserError
from engine.paths import Paths
from sparkcode import __version__
from sparkcode.agent.tools import default_tools
from sparkcode.config import McpServerConfig
from sparkcode.replay import Rebuilt
from sparkcode.sessions import SessionStore, new_session_id
from sparkcode.start import SessionOptions, find_resume, resolve_target

from ._asking import form_elicitation
from ._commands import as_mode, mode_state
from ._session import AcpSession, PromptBlock, user_error, workspace_of
from ._updates import history_updates

McpServer = HttpMcpServer | SseMcpServer | AcpMcpServer | McpServerStdio
_NAME_BAD = re.compile(r"[^A-Za-z0-9_-]")
ORIGIN = "acp"


@dataclass(frozen=True)
class AcpOptions:
    """How ``sparkcode acp`` was started: what every session talks to."""

    profile: str | None = None
    endpoint: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    vision: bool = False
    """``--vision`` with ``--endpoint``: that server's model takes images."""
    session: SessionOptions = SessionOptions(origin=ORIGIN)
    """Per-session defaults (recording, sampling, a forced first tool in tests)."""


def mcp_configs(servers: list[McpServer] | None) -> tuple[McpServerConfig, ...]:
    """The editor's MCP servers in ``config.toml``'s form; a name is made safe and
    prefixed ``editor-`` so it cannot shadow a server of ``config.toml``."""
    out: list[McpServerConfig] = []
    for server in servers or []:
        name = ("editor-" + _NAME_BAD.sub("_", server.name))[:32]
        if isinstance(server, McpServerStdio):
            out.append(
                McpServerConfig(
                    name=name,
                    command=server.command,
                    args=tuple(server.args),
                    env=tuple((e.name, e.value) for e in server.env),
                )
            )
        elif isinstance(server, HttpMcpServer):
            if server.headers:
                raise user_error(
                    f"MCP server {server.name!r}: HTTP headers are not "
                    "supported yet; configure it in config.toml instead"
                )
            out.append(McpServerConfig(name=name, url=server.url))
        else:
            raise user_error(
                f"MCP server {server.name!r}: only stdio and HTTP servers are "
                "supported (initialize advertised http: true, sse: false)"
            )
    return tuple(out)


class SparkcodeAcpAgent:
    """Implements the agent side of ACP v1 (:class:`acp.Agent`) over sparkcode."""

    def __init__(self, options: AcpOptions, paths: Paths) -> None:
        self.options = options
        self.paths = paths
        """The directories ``sparkcode acp`` resolved once, for every editor session."""
        self.sessions: dict[str, AcpSession] = {}
        self.client: Client | None = None
        self.form_elicitation = False
        """The editor takes form elicitations (``ask_user`` without options)."""

    def on_connect(self, conn: Client) -> None:
        self.client = conn

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: Any = None,
        client_info: Any = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        self.form_elicitation = form_elicitation(client_capabilities)
        return InitializeResponse(
            protocol_version=min(protocol_version, PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(
                load_session=True,
                prompt_capabilities=PromptCapabilities(
                    image=self._vision(), audio=False, embedded_context=True
                ),
                mcp_capabilities=McpCapabilities(http=True, sse=False),
            ),
            agent_info=Implementation(name="sparkcode", title="sparkcode", version=__version__),
        )

    def _vision(self) -> bool:
        """Image prompts are offered when the model takes images: the profile's
        ``[model] vision`` (or ``--vision`` with ``--endpoint``). A profile that cannot
        be read offers none here; ``session/new`` then names the problem."""
        opts = self.options
        try:
            return resolve_target(
                Path.cwd(),
                self.paths,
                profile=opts.profile,
                endpoint=opts.endpoint,
                model=opts.model,
                vision=opts.vision,
            ).vision
        except UserError:
            return False

    async def authenticate(self, method_id: str, **kwargs: Any) -> None:
        return None  # a local agent: nothing to log in to

    async def new_session(
        self, cwd: str, mcp_servers: list[McpServer] | None = None, **kwargs: Any
    ) -> NewSessionResponse:
        session = self._session(new_session_id(), cwd, mcp_servers)
        session.start()
        await session.announce()
        return NewSessionResponse(
            session_id=session.id, modes=mode_state(self._initial_mode(session))
        )

    async def load_session(
        self, cwd: str, session_id: str, mcp_servers: list[McpServer] | None = None, **kwargs: Any
    ) -> LoadSessionResponse:
        store = SessionStore(self.paths.sessions_dir)
        workspace = workspace_of(cwd)
        try:
            newest = latest_continuation(store, store.resolve(session_id).stem)
            rebuilt = await find_resume(store, workspace, session_id=newest)
        except UserError as exc:
            raise user_error(str(exc)) from None
        old = self.sessions.pop(session_id, None)
        if old is not None:
            await old.aclose()
        session = self._session(session_id, cwd, mcp_servers, resume=rebuilt)
        # ACP: the conversation is shown again before the load answers.
        for update in history_updates(rebuilt.history, default_tools()):
            await session.send(update)
        session.start()
        await session.announce()
        return LoadSessionResponse(modes=mode_state(self._initial_mode(session)))

    def _session(
        self,
        session_id: str,
        cwd: str,
        mcp_servers: list[McpServer] | None,
        resume: Rebuilt | None = None,
    ) -> AcpSession:
        if self.client is None:
            raise RequestError.internal_error({"details": "not connected"})
        opts = self.options
        try:
            target = resolve_target(
                workspace_of(cwd),
                self.paths,
                profile=opts.profile,
                endpoint=opts.endpoint,
                model=opts.model,
                api_key_env=opts.api_key_env,
                vision=opts.vision,
            )
        except UserError as exc:
            raise user_error(str(exc)) from None
        extra = mcp_configs(mcp_servers)
        if extra:
            target = replace(
                target,
                config=msgspec.structs.replace(
                    target.config, mcp_servers=target.config.mcp_servers + extra
                ),
            )
        # A new recording for a loaded session: its parent is the one loaded; the mode
        # it was left in comes back with it.
        recorded = resume.mode if isinstance(resume, Rebuilt) else None
        session_options = replace(
            opts.session,
            origin=ORIGIN,
            resume=resume,
            permission_mode=recorded
            or opts.session.permission_mode
            or target.config.permission_mode,
        )
        record_id = new_session_id() if resume is not None else session_id
        session = AcpSession(
            session_id,
            self.client,
            target,
            session_options,
            self.paths,
            record_id=record_id,
            form_elicitation=self.form_elicitation,
        )
        self.sessions[session_id] = session
        return session

    def _initial_mode(self, session: AcpSession) -> Any:
        return session.mode or "sandbox"

    def _get(self, session_id: str) -> AcpSession:
        session = self.sessions.get(session_id)
        if session is None:
            raise user_error(
                f"unknown session {session_id!r}: start one with session/new or session/load",
                -32002,
            )
        return session

    async def set_session_mode(
        self, session_id: str, mode_id: str, **kwargs: Any
    ) -> SetSessionModeResponse:
        mode = as_mode(mode_id)
        if mode is None:
            raise user_error(
                f"unknown mode {mode_id!r} (modes: sandbox, ask, auto-edit, full-auto, plan)"
            )
        await self._get(session_id).set_mode(mode)
        return SetSessionModeResponse()

    async def prompt(
        self, session_id: str, prompt: list[PromptBlock], **kwargs: Any
    ) -> PromptResponse:
        return await self._get(session_id).prompt(prompt)

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self.sessions.get(session_id)
        if session is not None:  # a notification: an unknown ID has no one to tell
            session.cancel()

    async def aclose(self) -> None:
        for session in list(self.sessions.values()):
            await session.aclose()
        self.sessions.clear()


def latest_continuation(store: SessionStore, session_id: str) -> str:
    """The newest recording that continues ``session_id`` through ACP loads (itself
    when none does), read from the headers only."""
    children: dict[str, list[tuple[str, str]]] = {}
    for path in store.files():
        header = _header(path)
        parent = header.get("parent")
        if header.get("origin") == ORIGIN and isinstance(parent, str):
            children.setdefault(parent, []).append((str(header.get("created", "")), path.stem))
    current, seen = session_id, {session_id}
    while children.get(current):
        current = max(children[current])[1]
        if current in seen:
            break
        seen.add(current)
    return current


def _header(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            record = json.loads(fh.readline())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) and record.get("kind") == "header" else {}


__all__ = ["AcpOptions", "SparkcodeAcpAgent", "latest_continuation", "mcp_configs"]
