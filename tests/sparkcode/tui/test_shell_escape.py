"""``!cmd`` in the prompt over the real agent (the scripted OpenAI server as the model):
a real shell runs it under the shell tool's rules (approval, deny rules, the real
bubblewrap sandbox), its output is shown and goes with the next message; a declined
command says so and sends nothing; an empty one is refused and the prompt keeps it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Static

from engine.paths import Paths
from sparkcode.agent.core.user_shell import EMPTY, context_text
from sparkcode.agent.tools._sandbox import find_bwrap
from sparkcode.replay import rebuild_conversation
from sparkcode.sessions import SessionStore, load_session
from sparkcode.start import SessionOptions, build_session, resolve_target
from sparkcode.tui.widgets import ErrorMessage, Notice, ToolCard
from sparkcode.tui.widgets.approval import ApprovalCard
from tests.support.scripted import Reply, ScriptedServer

from .conftest import live_app
from .test_pilot import texts, type_line, until


def _last_user(server: ScriptedServer, request: int) -> str:
    content: Any = server.requests[request]["messages"][-1]["content"]
    assert isinstance(content, str), content
    return content


def test_context_text_caps_the_middle() -> None:
    assert context_text("ls", "a\nb") == (
        "[I ran this shell command myself; its result follows]\n$ ls\na\nb"
    )
    long = context_text("yes", "x" * 50 + "y" * 50, cap=20)
    assert "x" * 10 + "\n[... 80 characters cut ...]\n" + "y" * 10 in long


async def test_bang_runs_the_command_and_the_next_request_carries_it(
    workspace: Path, paths: Paths
) -> None:
    server = ScriptedServer(
        [Reply(content=["it printed a greeting"]), Reply(content=["nothing new"])]
    )
    app = live_app(workspace, paths, server)
    async with app.run_test(size=(110, 40)) as pilot:
        prompt = app.main.prompt
        await type_line(pilot, "!")
        await until(pilot, lambda: EMPTY in texts(app, ErrorMessage))
        assert prompt.value == "!"  # refused, not lost
        await type_line(pilot, "!echo hello-$((40 + 2)) && pwd")
        await until(
            pilot,
            lambda: any("its output goes with your next message" in t for t in texts(app, Notice)),
        )
        assert not app.main.turn_running and prompt.value == ""
        card = app.main.query_one(ToolCard)
        result = str(card.query_one(".tool-result", Static).render())
        assert "exit code 0" in result and "hello-42" in result
        assert server.requests == []  # no model request for the command itself
        await type_line(pilot, "what did it print?")
        await until(pilot, lambda: len(server.requests) == 1 and not app.main.turn_running)
        sent = _last_user(server, 0)
        assert sent.startswith(
            "[I ran this shell command myself; its result follows]\n"
            "$ echo hello-$((40 + 2)) && pwd\nexit code 0"
        )
        assert f"hello-42\n{workspace}" in sent
        assert sent.endswith("what did it print?")
        await type_line(pilot, "and now?")  # said once: the next message is plain
        await until(pilot, lambda: len(server.requests) == 2 and not app.main.turn_running)
        assert _last_user(server, 1) == "and now?"


async def test_a_declined_bang_command_is_not_run_nor_sent(workspace: Path, paths: Paths) -> None:
    server = ScriptedServer([Reply(content=["ok"])])
    app = live_app(workspace, paths, server, permission_mode="ask")
    async with app.run_test(size=(110, 40)) as pilot:
        await type_line(pilot, "!touch made.txt")
        await until(pilot, lambda: bool(app.main.query(ApprovalCard)))
        assert "touch made.txt" in app.main.query_one(ApprovalCard).request.summary
        await pilot.press("n")
        await until(
            pilot, lambda: any("!touch made.txt was not run" in t for t in texts(app, Notice))
        )
        assert not (workspace / "made.txt").exists()
        assert not app.main.turn_running
        await type_line(pilot, "hello")
        await until(pilot, lambda: len(server.requests) == 1 and not app.main.turn_running)
        assert _last_user(server, 0) == "hello"


async def test_a_deny_rule_refuses_a_bang_command(workspace: Path, paths: Paths) -> None:
    paths.config_file.parent.mkdir(parents=True, exist_ok=True)
    paths.config_file.write_text('[permissions]\ndeny = ["bash:rm *"]\n')
    (workspace / "keep.txt").write_text("kept\n")
    server = ScriptedServer([])
    app = live_app(workspace, paths, server)  # full-auto: only the rule stops it
    async with app.run_test(size=(110, 40)) as pilot:
        await type_line(pilot, "!rm keep.txt")
        await until(
            pilot,
            lambda: any(
                "!rm keep.txt was not run: refused: denied by rule 'bash:rm *'" in t
                for t in texts(app, Notice)
            ),
        )
        assert (workspace / "keep.txt").read_text() == "kept\n"
        assert not app.main.query(ApprovalCard)


async def test_a_bang_command_runs_in_the_sandbox(workspace: Path, paths: Paths) -> None:
    if find_bwrap().path is None:
        pytest.skip("bubblewrap does not work here")
    # Not under /tmp: the sandbox gives a private /tmp, where a write succeeds.
    outside = Path("/var/tmp") / f"sparkcode-bang-{os.getpid()}.txt"
    outside.unlink(missing_ok=True)
    server = ScriptedServer([])
    app = live_app(workspace, paths, server, permission_mode="sandbox")
    async with app.run_test(size=(110, 40)) as pilot:
        await type_line(pilot, "!touch inside.txt")
        await until(
            pilot,
            lambda: any("!touch inside.txt: its output goes" in t for t in texts(app, Notice)),
        )
        assert (workspace / "inside.txt").exists()
        await type_line(pilot, f"!touch {outside}")
        # The sandbox stops the write outside the workspace; running it outside asks.
        await until(pilot, lambda: bool(app.main.query(ApprovalCard)), timeout=10)
        assert "run outside the sandbox" in app.main.query_one(ApprovalCard).request.summary
        assert not outside.exists()
        await pilot.press("n")
        await until(pilot, lambda: not app.main.turn_running)
        assert not outside.exists()


async def test_a_session_resumed_after_a_bang_command_has_no_call_of_it(
    workspace: Path, paths: Paths
) -> None:
    server = ScriptedServer([Reply(content=["hello back"])])
    app = live_app(workspace, paths, server)
    async with app.run_test(size=(110, 40)) as pilot:
        await type_line(pilot, "hello")
        await until(pilot, lambda: len(server.requests) == 1 and not app.main.turn_running)
        await type_line(pilot, "!echo after-the-answer")
        await until(pilot, lambda: any("its output goes" in t for t in texts(app, Notice)))
    store = SessionStore(paths.sessions_dir)
    session = load_session(store.files()[0])
    assert [e.data["call_id"] for e in session.events if e.type == "ToolCallStarted"] == [
        "user-shell-2"
    ]  # recorded, as what the user ran
    rebuilt = await rebuild_conversation(session, store=store)
    # The model's answer had no tool call: the !cmd's recorded call is not taken for one.
    assert [m["role"] for m in rebuilt.history] == ["system", "user", "assistant"]
    assert "tool_calls" not in rebuilt.history[-1]


async def test_an_unsent_bang_output_goes_with_the_resumed_sessions_next_message(
    workspace: Path, paths: Paths
) -> None:
    """Quit after ``!cmd`` without sending: the resumed session's first message carries
    what it printed, as the quit one's would have; a refused command adds nothing."""
    paths.config_file.parent.mkdir(parents=True, exist_ok=True)
    paths.config_file.write_text('[permissions]\ndeny = ["bash:touch *"]\n')
    server = ScriptedServer([Reply(content=["hello back"])])
    app = live_app(workspace, paths, server)
    async with app.run_test(size=(110, 40)) as pilot:
        await type_line(pilot, "hello")
        await until(pilot, lambda: len(server.requests) == 1 and not app.main.turn_running)
        await type_line(pilot, "!echo kept-$((6 * 7))")
        await until(pilot, lambda: any("its output goes" in t for t in texts(app, Notice)))
        await type_line(pilot, "!touch refused-file")
        await until(pilot, lambda: any("was not run" in t for t in texts(app, Notice)))
    assert not (workspace / "refused-file").exists()
    store = SessionStore(paths.sessions_dir)
    session = load_session(store.files()[0])
    rebuilt = await rebuild_conversation(session, store=store)
    assert len(rebuilt.pending_context) == 1
    assert rebuilt.pending_context[0].startswith(
        "[I ran this shell command myself; its result follows]\n$ echo kept-$((6 * 7))\n"
    )
    assert "kept-42" in rebuilt.pending_context[0]
    assert any("goes with your next message" in note for note in rebuilt.notes)
    forked = await rebuild_conversation(session, turn=0, store=store)
    assert forked.pending_context == []  # a fork before the command does not get it

    resumed = ScriptedServer([Reply(content=["seen"])])
    target = resolve_target(workspace, paths, endpoint="http://engine.test/v1")
    agent_session = await build_session(
        target,
        SessionOptions(
            origin="tui",
            start_engine=False,
            transport=resumed.transport(),
            mcp=False,
            resume=rebuilt,
        ),
        paths,
    )
    async for _ in agent_session.agent.run_turn("what did it print?"):
        pass
    last = resumed.requests[0]["messages"][-1]["content"]
    assert last == rebuilt.pending_context[0] + "\n\nwhat did it print?"
    assert resumed.requests[0]["messages"][:3] == server.requests[0]["messages"] + [
        rebuilt.history[2]
    ]
