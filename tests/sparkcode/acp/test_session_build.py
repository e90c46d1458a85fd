"""A session is built in the background: boot progress as updates, the first prompt
waits (or is cancelled while waiting), a failed start is retried at the next prompt."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError, text_block

from engine.errors import UserError
from engine.paths import Paths
from sparkcode.acp import _session
from sparkcode.acp._session import BOOT_CALL, AcpSession
from sparkcode.config import Config
from sparkcode.start import AgentSession, SessionOptions, StartTarget, build_session
from sparkcode.target import Target
from tests.support.scripted import Reply, ScriptedServer


class Recorder:
    def __init__(self) -> None:
        self.updates: list[Any] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)


def make(workspace: Path, server: ScriptedServer) -> tuple[AcpSession, Recorder]:
    client = Recorder()
    target = StartTarget(workspace, Config(), Target.for_endpoint("http://scripted/v1"))
    options = SessionOptions(origin="acp", record=False, transport=server.transport())
    return AcpSession("s1", client, target, options, Paths.from_env()), client  # type: ignore[arg-type]


async def test_boot_progress_is_shown_and_the_first_prompt_waits_for_the_engine(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    booted = asyncio.Event()

    async def slow_build(
        target: StartTarget, options: SessionOptions, paths: Paths
    ) -> AgentSession:
        assert options.progress is not None
        say = options.progress
        # The supervisor reports from its own thread, as connection._ensure_engine does.
        worker = threading.Thread(
            target=lambda: [say("starting engine cpu-demo ..."), say("  loading weights")]
        )
        worker.start()
        worker.join()
        await booted.wait()
        return await build_session(target, options, paths)

    monkeypatch.setattr(_session, "build_session", slow_build)
    session, client = make(workspace, ScriptedServer([Reply(content=["hello"])]))
    session.start()
    prompt = asyncio.create_task(session.prompt([text_block("hi")]))
    await asyncio.sleep(0.2)
    assert not prompt.done()  # waiting for the engine
    lines = [
        u.content[0].content.text
        for u in client.updates
        if u.session_update == "tool_call_update" and u.content
    ]
    assert lines == ["starting engine cpu-demo ...", "  loading weights"]
    assert client.updates[0].session_update == "tool_call"
    assert client.updates[0].tool_call_id == BOOT_CALL
    booted.set()
    done = await asyncio.wait_for(prompt, 30)
    assert done.stop_reason == "end_turn"
    finished = [
        u
        for u in client.updates
        if u.session_update == "tool_call_update" and u.status == "completed"
    ]
    assert [u.tool_call_id for u in finished] == [BOOT_CALL]
    assert "hello" in "".join(
        u.content.text for u in client.updates if u.session_update == "agent_message_chunk"
    )
    await session.aclose()


async def test_a_prompt_cancelled_during_the_boot_returns_and_a_failed_start_is_retried(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempts: list[int] = []
    never = asyncio.Event()

    async def failing(target: StartTarget, options: SessionOptions, paths: Paths) -> AgentSession:
        attempts.append(1)
        if len(attempts) == 1:
            await never.wait()
        if len(attempts) == 2:
            raise UserError("no engine is running; start one with `sparkcode engine start`")
        return await build_session(target, options, paths)

    monkeypatch.setattr(_session, "build_session", failing)
    session, client = make(workspace, ScriptedServer([Reply(content=["back"])]))
    prompt = asyncio.create_task(session.prompt([text_block("hi")]))
    await asyncio.sleep(0.1)
    session.cancel()
    assert (await asyncio.wait_for(prompt, 10)).stop_reason == "cancelled"
    assert session._build is not None
    session._build.cancel()  # the first (hung) start, given up
    await asyncio.sleep(0)
    with pytest.raises(RequestError, match="no engine is running"):
        await session.prompt([text_block("hi")])
    done = await session.prompt([text_block("hi")])  # a new start, which works
    assert done.stop_reason == "end_turn" and len(attempts) == 3
    await session.aclose()
