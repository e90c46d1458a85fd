"""The conversation state without a running app: settings given before the agent exists
reach it once, in order; a resumed recording goes to exactly one agent."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from sparkcode.replay import Rebuilt
from sparkcode.tui.agent_port import AgentPort, SessionRequest
from sparkcode.tui.conversation_state import ConversationState
from sparkcode.tui.scripted import ScriptedAgent


async def test_settings_wait_for_the_agent_and_the_recording_goes_to_one(tmp_path: Path) -> None:
    requests: list[SessionRequest] = []
    built: list[ScriptedAgent] = []

    async def factory(request: SessionRequest) -> AgentPort:
        requests.append(request)
        built.append(ScriptedAgent(scripts=[]))
        return built[-1]

    recording = cast(Rebuilt, object())
    state = ConversationState(tmp_path, factory, recording)
    state.with_agent(lambda agent: agent.set_reasoning_effort("max"))
    state.with_agent(lambda agent: agent.set_reasoning_effort("high"))
    assert state.agent is None and requests == []

    agent, fresh = await state.ensure_agent()
    assert fresh and agent is built[0] and built[0].reasoning_effort == "high"
    assert requests == [SessionRequest(tmp_path, recording)] and state.resume is None
    assert await state.ensure_agent() == (agent, False) and len(requests) == 1

    state.with_agent(lambda a: a.set_reasoning_effort("low"))  # now: applied at once
    assert built[0].reasoning_effort == "low"

    await state.close_agent()
    assert built[0].closed and state.agent is None
    again, fresh = await state.ensure_agent()
    assert fresh and again is built[1] and requests[1] == SessionRequest(tmp_path, None)
