"""Small-model mode in the TUI: the real agent, built by the session builder, over a
scripted server; its JSON steps show as a tool card and as prose, never as JSON,
while the recording keeps the steps byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

from engine.paths import Paths
from engine.profiles import AgentKnobs
from sparkcode.agent.core import events as ev
from sparkcode.replay import play_events
from sparkcode.sessions import SessionStore, exchange_output, is_model_call
from sparkcode.start import SessionOptions, build_session, resolve_target
from sparkcode.tui import SparkcodeApp, TuiSettings
from sparkcode.tui.agent_adapter import LiveAgent
from sparkcode.tui.agent_port import AgentPort, SessionRequest
from sparkcode.tui.scripted import ScriptedEngine, chunks
from sparkcode.tui.widgets import AssistantMessage, ToolCard
from tests.support.scripted import Reply, ScriptedServer

from .conftest import READY
from .test_pilot import type_line, until

CALL = '{"tool": "read_file", "arguments": {"path": "README.md"}}'
ANSWER = '{"answer": "The README is a title:\\n\\n# demo\\n\\nIt says \\"demo\\" \\u2713"}'


def on_screen(app: SparkcodeApp) -> str:
    """The screen's text as drawn, line by line."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


async def test_steps_show_as_a_tool_card_and_the_answer_as_prose(
    workspace: Path, paths: Paths
) -> None:
    # Cut into 3-character deltas: escapes arrive split, as tokens split them.
    server = ScriptedServer([Reply(content=chunks(CALL, 3)), Reply(content=chunks(ANSWER, 3))])
    target = resolve_target(workspace, paths, endpoint="http://engine.test/v1")
    built: list[LiveAgent] = []

    async def factory(request: SessionRequest) -> AgentPort:
        session = await build_session(
            target,
            SessionOptions(
                origin="tui",
                start_engine=False,
                transport=server.transport(),
                mcp=False,
                knobs=AgentKnobs(structured_tools=True),
                permission_mode="full-auto",
            ),
            paths,
        )
        built.append(LiveAgent(session))
        return built[-1]

    app = SparkcodeApp(
        TuiSettings(workspace=workspace, paths=paths, model="m"),
        ScriptedEngine(current=READY),
        factory,
    )
    expected = json.loads(ANSWER)["answer"]
    async with app.run_test(size=(100, 40)) as pilot:
        await type_line(pilot, "what is in README.md?")
        await until(pilot, lambda: not app.main.turn_running and bool(built))
        for _ in range(2):  # as streamed, then redrawn from the history (what /undo does)
            assert [m.text for m in app.main.query(AssistantMessage)] == [expected]
            cards = list(app.main.query(ToolCard))
            assert [(c.tool, c.arguments, c.state) for c in cards] == [
                ("read_file", {"path": "README.md"}, "done")
            ]
            assert "# demo" in str(cards[0].query(".tool-result").first().render())
            await pilot.pause(0.2)  # the answer's stream buffer flushes
            drawn = on_screen(app)
            assert 'It says "demo" \u2713' in drawn and "⚙ read_file" in drawn
            assert '{"tool"' not in drawn and '"answer"' not in drawn and "\\n" not in drawn
            await app.main.redraw()
        session_id = built[0].session_id
    # The recording keeps what the server sent, the steps as JSON.
    assert session_id is not None
    session = SessionStore(paths.sessions_dir).load(session_id)
    said = [exchange_output(e).text("content") for e in session.exchanges if is_model_call(e)]
    assert said == [CALL, ANSWER]
    # Played back, it shows what the user saw.
    played = [e async for e in play_events(session, speed=0)]
    assert "".join(e.text for e in played if isinstance(e, ev.ContentDelta)) == expected
    assert [e.name for e in played if isinstance(e, ev.ToolCallStarted)] == ["read_file"]
