"""Pilot tests of the conversation commands: /instructions, /init, /undo + /redo,
/thinking-history, resuming from /sessions (also a session of another workspace)
and opening with a resumed conversation."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import DataTable, Markdown

from engine.paths import Paths
from sparkcode.agent.extensions.instructions import load_instructions
from sparkcode.sessions import SessionStore
from sparkcode.start import find_resume
from sparkcode.tui import SparkcodeApp, TuiSettings
from sparkcode.tui.agent_port import AgentPort, SessionRequest
from sparkcode.tui.screens.confirm import ConfirmScreen
from sparkcode.tui.screens.sessions import SessionsScreen
from sparkcode.tui.scripted import ScriptedAgent, ScriptedEngine, answer_script, edit_script
from sparkcode.tui.widgets import ApprovalCard, AssistantMessage, Notice, ToolCard, UserMessage
from tests.sparkcode.start.test_resume import record_two_turns

from .conftest import READY
from .test_pilot import DIFF, AppFactory, texts, type_line, until


def app_with(
    workspace: Path, paths: Paths, agent: ScriptedAgent, **kwargs: object
) -> tuple[SparkcodeApp, list[SessionRequest]]:
    requests: list[SessionRequest] = []

    async def factory(request: SessionRequest) -> AgentPort:
        requests.append(request)
        return agent

    settings = TuiSettings(
        workspace=workspace,
        model="m",
        poll_s=0.1,
        idle_poll_s=0.1,
        paths=paths,
        instructions=load_instructions(workspace),
    )
    app = SparkcodeApp(settings, ScriptedEngine(current=READY), factory, **kwargs)  # type: ignore[arg-type]
    return app, requests


async def test_instructions_are_announced_and_shown(workspace: Path, paths: Paths) -> None:
    (workspace / "AGENTS.md").write_text("Always run `make test`.\n")
    app, _ = app_with(workspace, paths, ScriptedAgent([]))
    async with app.run_test(size=(100, 36)) as pilot:
        await until(
            pilot, lambda: any("project instructions: AGENTS.md" in t for t in texts(app, Notice))
        )
        await type_line(pilot, "/instructions")
        await until(pilot, lambda: bool(app.main.query("Markdown.help")))
        shown = app.main.query_one("Markdown.help", Markdown).source
        assert "### AGENTS.md" in shown and "Always run `make test`." in shown


async def test_instructions_notes_reach_the_screen(workspace: Path, paths: Paths) -> None:
    (workspace / "AGENTS.md").write_bytes(b"\xff\xfe bad\n")
    app, _ = app_with(workspace, paths, ScriptedAgent([]))
    async with app.run_test(size=(100, 36)) as pilot:
        await until(pilot, lambda: any("AGENTS.md is not UTF-8" in t for t in texts(app, Notice)))
        await type_line(pilot, "/instructions")
        await until(pilot, lambda: bool(app.main.query("Markdown.help")))
        assert "/init" in app.main.query_one("Markdown.help", Markdown).source


async def test_init_writes_the_draft_only_when_approved(workspace: Path, paths: Paths) -> None:
    app, _ = app_with(workspace, paths, ScriptedAgent([]))
    async with app.run_test(size=(100, 40)) as pilot:
        await type_line(pilot, "/init")
        await until(pilot, lambda: bool(app.main.query(ApprovalCard)))
        assert "b/AGENTS.md" in str(app.main.query_one(ApprovalCard).request.detail)
        await pilot.press("n")
        await until(pilot, lambda: any("AGENTS.md not written" in t for t in texts(app, Notice)))
        assert not (workspace / "AGENTS.md").exists()
        await type_line(pilot, "/init")
        await until(pilot, lambda: bool(app.main.query(ApprovalCard)))
        await pilot.press("y")
        await until(pilot, lambda: (workspace / "AGENTS.md").exists())
        assert (workspace / "AGENTS.md").read_text().startswith("# ws\n")
        await type_line(pilot, "/init")  # a second time: refused, named
        await until(
            pilot,
            lambda: (
                any("already exists" in t for t in texts(app, Notice))
                or any("already exists" in str(e.render()) for e in app.main.query("ErrorMessage"))
            ),
        )


async def test_undo_and_redo_redraw_the_conversation(app_factory: AppFactory) -> None:
    app, agent, _ = app_factory([answer_script("first answer"), edit_script("src/main.py", DIFF)])
    async with app.run_test(size=(100, 40)) as pilot:
        await type_line(pilot, "hello")
        await until(pilot, lambda: not app.main.turn_running and agent.turns_run == 1)
        await type_line(pilot, "change it")
        await until(pilot, lambda: bool(app.main.query(ApprovalCard)))
        await pilot.press("y")
        await until(pilot, lambda: not app.main.turn_running and agent.turns_run == 2)
        agent.history = [
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "first answer"},
        ]
        await type_line(pilot, "/undo")
        await until(pilot, lambda: any("restored src/main.py" in t for t in texts(app, Notice)))
        # The screen shows what the agent's history holds now: the first turn only.
        assert [w.text for w in app.main.query(UserMessage)] == ["hello"]
        assert not app.main.query(ToolCard)
        await type_line(pilot, "/redo")
        await until(pilot, lambda: any("src/main.py is back" in t for t in texts(app, Notice)))
        assert agent.edits_applied == ["src/main.py"]


async def test_thinking_history_toggles(app_factory: AppFactory) -> None:
    app, agent, _ = app_factory([answer_script("ok")])
    async with app.run_test(size=(100, 30)) as pilot:
        await type_line(pilot, "/thinking-history on")
        await until(pilot, lambda: any("thinking history: on" in t for t in texts(app, Notice)))
        await type_line(pilot, "hi")
        await until(pilot, lambda: agent.turns_run == 1)
        assert agent.thinking_history is True
        await type_line(pilot, "/thinking-history off")
        await until(pilot, lambda: agent.thinking_history is False)
        await type_line(pilot, "/thinking-history maybe")
        await until(
            pilot,
            lambda: any(
                "usage: /thinking-history on|off" in str(e.render())
                for e in app.main.query("ErrorMessage")
            ),
        )


async def test_opening_with_a_resumed_conversation(tmp_path: Path, paths: Paths) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    sid, _ = await record_two_turns(ws, paths)
    rebuilt = await find_resume(SessionStore(paths.sessions_dir), ws, latest=True)
    agent = ScriptedAgent([answer_script("third")])
    app, requests = app_with(ws, paths, agent, resume=rebuilt)
    async with app.run_test(size=(100, 40)) as pilot:
        await until(
            pilot,
            lambda: any(f"resumed session {sid} after turn 2" in t for t in texts(app, Notice)),
        )
        assert [w.text for w in app.main.query(UserMessage)] == ["write notes", "and then?"]
        assert [w.text for w in app.main.query(AssistantMessage)] == ["ok", "second"]
        assert [(c.tool, c.state) for c in app.main.query(ToolCard)] == [("write_file", "done")]
        await type_line(pilot, "go on")
        await until(pilot, lambda: agent.turns_run == 1)
        assert requests[0].resume is rebuilt and requests[0].workspace == ws


async def test_sessions_continue_action_resumes(tmp_path: Path, paths: Paths) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    sid, _ = await record_two_turns(ws, paths)
    app, requests = app_with(ws, paths, ScriptedAgent([answer_script("more")]))
    async with app.run_test(size=(110, 40)) as pilot:
        await type_line(pilot, "/sessions")
        await until(pilot, lambda: isinstance(app.screen, SessionsScreen))
        await until(pilot, lambda: app.screen.query_one(DataTable).row_count == 1)
        await pilot.press("c")
        await until(pilot, lambda: any(f"resumed session {sid}" in t for t in texts(app, Notice)))
        assert app.screen is app.main
        await type_line(pilot, "and now")
        await until(pilot, lambda: bool(requests))
        assert requests[0].resume is not None and requests[0].resume.session_id == sid


async def test_a_session_of_another_workspace_asks_before_switching(
    tmp_path: Path, paths: Paths
) -> None:
    recorded = tmp_path / "recorded"
    here = tmp_path / "here"
    recorded.mkdir()
    here.mkdir()
    sid, _ = await record_two_turns(recorded, paths)
    app, requests = app_with(here, paths, ScriptedAgent([answer_script("x")]))
    async with app.run_test(size=(110, 40)) as pilot:
        app.main.run_worker(app.main.resume_session(sid))
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        question = str(app.screen.query_one("#confirm-question").render())
        assert str(recorded) in question and str(here) in question
        await pilot.press("n")
        await until(pilot, lambda: any("not resumed" in t for t in texts(app, Notice)))
        assert app.main.workspace == here and app.main.resume is None
        app.main.run_worker(app.main.resume_session(sid))
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await until(pilot, lambda: any(f"resumed session {sid}" in t for t in texts(app, Notice)))
        assert app.main.workspace == recorded
        assert app.main.prompt.files.root == recorded
        await type_line(pilot, "go")
        await until(pilot, lambda: bool(requests))
        assert requests[0].workspace == recorded


async def test_resuming_an_unknown_session_is_an_error_on_screen(
    workspace: Path, paths: Paths
) -> None:
    app, _ = app_with(workspace, paths, ScriptedAgent([]))
    async with app.run_test(size=(100, 30)) as pilot:
        app.main.run_worker(app.main.resume_session("deadbeef"))
        await until(
            pilot,
            lambda: any(
                "cannot resume deadbeef: no session with ID" in str(e.render())
                for e in app.main.query("ErrorMessage")
            ),
        )
