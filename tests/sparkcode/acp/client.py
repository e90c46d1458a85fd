"""An editor-side ACP client for tests: the SDK's client over a real ``sparkcode acp``.

:func:`spawn` starts ``python -m sparkcode acp ARGS`` as an editor would (stdio
pipes, the test's SPARKCODE_HOME) and connects the SDK's
``ClientSideConnection``; :class:`EditorClient` keeps every ``session/update``
and answers ``session/request_permission`` with a chosen option.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from acp import Client, spawn_agent_process
from acp.client.connection import ClientSideConnection
from acp.schema import (
    AllowedOutcome,
    DeniedOutcome,
    PermissionOption,
    RequestPermissionResponse,
    ToolCallUpdate,
)

from tests.support import ROOT


@dataclass
class EditorClient:
    """What a test editor saw, and how it answers approvals."""

    answer: str | None = "allow_once"
    """The option to pick; None answers ``cancelled``."""
    updates: list[tuple[str, Any]] = field(default_factory=list)
    permissions: list[tuple[ToolCallUpdate, list[PermissionOption]]] = field(default_factory=list)
    asked: asyncio.Event = field(default_factory=asyncio.Event)
    hold: asyncio.Event | None = None
    """When set, approvals wait for it (a test cancels meanwhile)."""

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **kwargs: Any,
    ) -> RequestPermissionResponse:
        self.permissions.append((tool_call, options))
        self.asked.set()
        if self.hold is not None:
            await self.hold.wait()
        if self.answer is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=self.answer)
        )

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append((session_id, update))

    def of(self, kind: str, session_id: str | None = None) -> list[Any]:
        """The updates of one kind (``agent_message_chunk``, ``tool_call``...)."""
        return [
            u
            for sid, u in self.updates
            if u.session_update == kind and (session_id is None or sid == session_id)
        ]

    def text(self, kind: str = "agent_message_chunk", session_id: str | None = None) -> str:
        return "".join(u.content.text for u in self.of(kind, session_id))


@asynccontextmanager
async def spawn(
    client: EditorClient, *args: str, home: Path, cwd: Path, unstable: bool = False
) -> AsyncIterator[tuple[ClientSideConnection, asyncio.subprocess.Process]]:
    """``unstable``: the client takes the protocol's unstable methods (form elicitation)."""
    env = {"SPARKCODE_HOME": str(home), "PYTHONPATH": str(ROOT), "PATH": os.environ.get("PATH", "")}
    # The agent's stderr (its log) goes to a file a failing test can show.
    home.mkdir(parents=True, exist_ok=True)
    with (home / "acp-agent.log").open("ab") as log:
        # The test editor implements the two methods the agent calls; the SDK answers
        # method-not-found for the rest of the Client protocol.
        async with spawn_agent_process(
            cast(Client, client),
            sys.executable,
            "-m",
            "sparkcode",
            "acp",
            *args,
            env=env,
            cwd=cwd,
            transport_kwargs={"stderr": log.fileno()},
            use_unstable_protocol=unstable,
        ) as (conn, proc):
            yield conn, proc
