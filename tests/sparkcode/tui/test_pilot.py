"""Every pane and key binding of the TUI, driven with Pilot over a scripted agent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from textual.pilot import Pilot
from textual.widgets import Log, Markdown

from engine.supervisor import EngineStatus, NodeStatus
from sparkcode.agent.core import events as ev
from sparkcode.operations import EFFORTS
from sparkcode.tui import SparkcodeApp
from sparkcode.tui.screens.main import MainScreen
from sparkcode.tui.scripted import (
    ScriptedAgent,
    ScriptedEngine,
    answer_script,
    edit_script,
    failing_script,
)
from sparkcode.tui.widgets import (
    ApprovalCard,
    AssistantMessage,
    EnginePanel,
    ErrorMessage,
    Notice,
    PromptInput,
    StatusBar,
    ThinkingBlock,
    ToolCard,
    UserMessage,
)
from sparkcode.tui.widgets.chat import DegenerationWarning

from .conftest import READY

AppFactory = Callable[..., tuple[SparkcodeApp, ScriptedAgent, ScriptedEngine]]
DIFF = "--- a/src/main.py\n+++ b/src/main.py\n@@ -1 +1 @@\n-print('hi')\n+print('bye')\n"


async def until(pilot: Pilot[Any], condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Let the app run until ``condition`` holds (fail after ``timeout``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "condition not reached in time"
        await pilot.pause(0.02)


def main_screen(app: SparkcodeApp) -> MainScreen:
    return app.main


def texts(app: SparkcodeApp, kind: type[Any]) -> list[str]:
    return [str(w.render()) for w in app.main.query(kind)]


async def type_line(pilot: Pilot[Any], text: str) -> None:
    """Put ``text`` in the prompt and press Enter (key-by-key typing is tested apart)."""
    app = pilot.app
    assert isinstance(app, SparkcodeApp)
    app.main.prompt.value = text
    await pilot.press("enter")


async def test_idle_screen_shows_welcome_and_empty_figures(app_factory: AppFactory) -> None:
    app, _, _ = app_factory()
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: bool(app.main.query(Notice)))
        assert "type a request" in texts(app, Notice)[0]
        bar = str(app.main.query_one("#status-figures").render())
        assert "decode – tok/s" in bar and "ctx –/–" in bar
        assert not app.main.engine_panel_shown
        assert isinstance(app.focused, PromptInput)


async def test_a_turn_streams_thinking_answer_and_live_figures(app_factory: AppFactory) -> None:
    hold = asyncio.Event()
    app, agent, _ = app_factory(
        [
            answer_script(
                "Here is **the** answer.", thinking="I should look at the files first.", hold=hold
            )
        ]
    )
    async with app.run_test(size=(100, 30)) as pilot:
        await type_line(pilot, "explain the code")
        await until(pilot, lambda: bool(app.main.query(AssistantMessage)))
        thinking = app.main.query_one(ThinkingBlock)
        await until(pilot, lambda: "answer" in app.main.query_one(AssistantMessage).source)
        # Mid-stream: thinking done (collapsed), used / budget in its title.
        assert thinking.title == "thinking: 9 / 1536 tokens"
        assert thinking.collapsed
        assert "look at the files" in thinking.text
        assert app.main.turn_running
        hold.set()
        await until(pilot, lambda: not app.main.turn_running)
        assert agent.prompts == ["explain the code"]
        assert texts(app, UserMessage) == ["explain the code"]
        assert app.main.query_one(AssistantMessage).source == "Here is **the** answer."
        stats = app.main.query_one(StatusBar).stats
        assert stats.decode_tps == 42.0 and stats.ttft_s == 0.25
        assert stats.context_used is not None and stats.context_limit == 8192
        figures = app.main.query_one("#status-figures")
        await until(pilot, lambda: "KV 3%" in str(figures.render()))  # redrawn 4 times a second
        bar = str(figures.render())
        assert "decode 42.0 tok/s" in bar and "prefill 480 tok/s" in bar
        assert "TTFT 0.25 s" in bar and "cache 50%" in bar and "KV 3%" in bar
        assert stats.decode_history == (42.0,)


async def test_history_walks_earlier_prompts(app_factory: AppFactory) -> None:
    app, _, _ = app_factory([answer_script("a"), answer_script("b")])
    async with app.run_test(size=(100, 30)) as pilot:
        await type_line(pilot, "first")
        await until(pilot, lambda: not app.main.turn_running and len(texts(app, UserMessage)) == 1)
        await type_line(pilot, "second")
        await until(pilot, lambda: not app.main.turn_running and len(texts(app, UserMessage)) == 2)
        prompt = app.main.prompt
        await pilot.press(*"draft")
        await pilot.press("up")
        assert prompt.value == "second"
        await pilot.press("up", "up")
        assert prompt.value == "first"
        await pilot.press("down")
        assert prompt.value == "second"
        await pilot.press("down")
        assert prompt.value == "draft"


async def test_slash_commands_change_the_agent(app_factory: AppFactory) -> None:
    app, agent, _ = app_factory([answer_script("ok")])
    async with app.run_test(size=(100, 30)) as pilot:
        # Settings given before the agent exists are applied when it is built.
        await type_line(pilot, "/effort high")
        await type_line(pilot, "/budget 99")
        await type_line(pilot, "/approve full-auto")
        await type_line(pilot, "/model other-model")
        await type_line(pilot, "hello")
        await until(pilot, lambda: not app.main.turn_running and agent.turns_run == 1)
        assert agent.reasoning_effort == "high"
        assert agent.thinking_token_budget == 99
        assert agent.approval_mode == "full-auto"
        assert agent.model == "other-model"
        await type_line(pilot, "/effort max")
        await until(pilot, lambda: agent.reasoning_effort == "max")
        await type_line(pilot, "/model")
        await until(pilot, lambda: any("model: other-model" in t for t in texts(app, Notice)))
        notices = " ".join(texts(app, Notice))
        assert "reasoning effort: high" in notices and "thinking budget: 99" in notices
        assert "approval mode: full-auto" in notices


async def test_bad_commands_are_reported_inline(app_factory: AppFactory) -> None:
    app, agent, _ = app_factory()
    async with app.run_test(size=(100, 30)) as pilot:
        await type_line(pilot, "/effort huge")
        await type_line(pilot, "/budget lots")
        await type_line(pilot, "/nonsense")
        await type_line(pilot, "/c")  # clear, compact or context: none is guessed
        await until(pilot, lambda: len(texts(app, ErrorMessage)) == 4)
        errors = texts(app, ErrorMessage)
        assert errors[0] == "usage: /effort " + "|".join(EFFORTS)  # every value the setting takes
        assert errors[1].startswith("usage: /budget N")
        assert errors[2].startswith("unknown command /nonsense")
        assert errors[3].startswith("unknown command /c;")
        assert agent.turns_run == 0


async def test_help_clear_sessions_and_engine_commands(app_factory: AppFactory) -> None:
    app, agent, _ = app_factory([answer_script("ok")])
    async with app.run_test(size=(100, 30)) as pilot:
        await type_line(pilot, "/help")
        await until(pilot, lambda: bool(app.main.query("Markdown.help")))
        help_text = app.main.query_one("Markdown.help", Markdown).source
        assert "/approve sandbox|ask|auto-edit|full-auto|plan" in help_text
        assert "/undo" in help_text and "/plan" in help_text and "/act" in help_text
        await type_line(pilot, "/engine")
        await until(pilot, lambda: app.main.engine_panel_shown)
        await type_line(pilot, "/engine")
        await until(pilot, lambda: not app.main.engine_panel_shown)
        await type_line(pilot, "/sessions")
        await until(
            pilot,
            lambda: any("session" in t for t in texts(app, Notice)) or len(app.screen_stack) > 2,
        )
        if len(app.screen_stack) > 2:  # the session browser exists: back to the main screen
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is app.main)
        await type_line(pilot, "hello")
        await until(pilot, lambda: not app.main.turn_running and agent.turns_run == 1)
        await type_line(pilot, "/clear")
        await until(pilot, lambda: agent.resets == 1)
        await until(pilot, lambda: not app.main.query(UserMessage))
        assert texts(app, Notice) == ["new conversation"]


async def test_tab_completes_commands_and_workspace_paths(app_factory: AppFactory) -> None:
    app, _, _ = app_factory()
    async with app.run_test(size=(100, 30)) as pilot:
        prompt = app.main.prompt
        await pilot.press(*"/eff")
        await until(pilot, lambda: prompt.suggestion == "ort")
        await pilot.press("tab")
        assert prompt.value == "/effort"
        prompt.value = ""
        await pilot.press(*"look at @src/ma")
        await until(pilot, lambda: prompt.suggestion == "in.py")
        await pilot.press("tab")
        assert prompt.value == "look at @src/main.py"
        assert isinstance(app.focused, PromptInput)


async def test_approving_an_edit_then_undoing_it(app_factory: AppFactory) -> None:
    app, agent, _ = app_factory([edit_script("src/main.py", DIFF)])
    async with app.run_test(size=(100, 40)) as pilot:
        await type_line(pilot, "change the greeting")
        await until(pilot, lambda: bool(app.main.query(ApprovalCard)))
        card = app.main.query_one(ApprovalCard)
        await until(pilot, lambda: app.focused is card)  # focused once mounted
        assert app.main.query_one(ToolCard).state == "waiting"
        await pilot.press("y")
        await until(pilot, lambda: not app.main.turn_running)
        assert agent.edits_applied == ["src/main.py"]
        assert not app.main.query(ApprovalCard)
        tool = app.main.query_one(ToolCard)
        assert tool.state == "done"
        assert "+print('bye')" in str(tool.query_one(".tool-diff").render())
        assert isinstance(app.focused, PromptInput)
        await type_line(pilot, "/und")  # shown completed, so Enter runs /undo
        await until(pilot, lambda: any("restored src/main.py" in t for t in texts(app, Notice)))
        assert agent.edits_applied == []


async def test_denying_an_edit(app_factory: AppFactory) -> None:
    app, agent, _ = app_factory([edit_script("src/main.py", DIFF)])
    async with app.run_test(size=(100, 40)) as pilot:
        await type_line(pilot, "change it")
        await until(pilot, lambda: bool(app.main.query(ApprovalCard)))
        await pilot.click("#deny")
        await until(pilot, lambda: not app.main.turn_running)
        assert agent.edits_applied == []
        decision = agent.approvals[0].future.result()
        assert not decision.approved and decision.reason
        assert app.main.query_one(ToolCard).state == "denied"
        assert any("denied tool call" in t for t in texts(app, Notice))


async def test_typing_on_an_approval_card_goes_to_the_prompt_and_answers_nothing(
    app_factory: AppFactory,
) -> None:
    app, agent, _ = app_factory([edit_script("src/main.py", DIFF), answer_script("ok")])
    async with app.run_test(size=(100, 40)) as pilot:
        await type_line(pilot, "change it")
        await until(pilot, lambda: bool(app.main.query(ApprovalCard)))
        card = app.main.query_one(ApprovalCard)
        await until(pilot, lambda: app.focused is card)  # focused once mounted
        # Letters of the answer keys inside the text (a, n, y) do not answer the card.
        await pilot.press(*"wait, not any yet")
        await pilot.pause(0.1)
        assert not agent.approvals[0].future.done()
        assert app.main.prompt.value == "wait, not any yet"
        assert isinstance(app.focused, PromptInput)
        # Enter queues the text (it goes after the turn) and hands the focus back to
        # the card, still unanswered.
        await pilot.press("enter")
        await until(pilot, lambda: app.focused is card)
        assert app.main.prompt.value == ""
        assert [str(line.render()) for line in app.main.queue.lines()] == [
            "⏳ after turn: wait, not any yet"
        ]
        assert not agent.approvals[0].future.done()
        # The explicit key still answers; the queued message is the next turn.
        await pilot.press("n")
        await until(pilot, lambda: agent.turns_run == 2 and not app.main.turn_running)
        assert not agent.approvals[0].future.result().approved
        assert agent.edits_applied == []
        assert agent.prompts == ["change it", "wait, not any yet"]  # nothing typed was lost


async def test_escape_stops_a_running_turn(app_factory: AppFactory, monkeypatch: Any) -> None:
    monkeypatch.setattr("sparkcode.tui.screens.main.STOP_GRACE_S", 0.05)
    hold = asyncio.Event()  # never set: the turn only ends when stopped
    app, agent, _ = app_factory([answer_script("partial answer", hold=hold)])
    async with app.run_test(size=(100, 30)) as pilot:
        await type_line(pilot, "go")
        await until(pilot, lambda: bool(app.main.query(AssistantMessage)))
        await pilot.press("escape")
        await until(pilot, lambda: not app.main.turn_running)
        assert agent.cancels == 1
        assert "turn stopped" in texts(app, Notice)
        # The partial answer stays on screen.
        assert app.main.query_one(AssistantMessage).source == "partial answer"


async def test_agent_errors_show_inline_and_the_next_prompt_works(app_factory: AppFactory) -> None:
    app, agent, _ = app_factory(
        [failing_script("engine gone: connection refused"), answer_script("back")]
    )
    async with app.run_test(size=(100, 30)) as pilot:
        await type_line(pilot, "one")
        await until(pilot, lambda: bool(app.main.query(ErrorMessage)))
        assert texts(app, ErrorMessage) == ["engine gone: connection refused"]
        await until(pilot, lambda: not app.main.turn_running)
        await type_line(pilot, "two")
        await until(pilot, lambda: not app.main.turn_running and agent.turns_run == 2)
        assert app.main.query_one(AssistantMessage).source == "back"


async def test_ctrl_t_toggles_thinking_blocks(app_factory: AppFactory) -> None:
    app, _, _ = app_factory([answer_script("x", thinking="hmm, let me think")])
    async with app.run_test(size=(100, 30)) as pilot:
        await type_line(pilot, "q")
        await until(pilot, lambda: not app.main.turn_running)
        block = app.main.query_one(ThinkingBlock)
        assert block.collapsed
        await pilot.press("ctrl+t")
        assert not block.collapsed
        await pilot.press("ctrl+t")
        assert block.collapsed


async def test_degenerate_answer_offers_to_stop(app_factory: AppFactory) -> None:
    hold = asyncio.Event()
    app, agent, _ = app_factory([answer_script("the the " * 40, hold=hold)])
    async with app.run_test(size=(100, 30)) as pilot:
        # Only a warned stream still runs to be stopped (``stop`` stops it at once).
        await type_line(pilot, "/degenerate warn")
        await type_line(pilot, "talk")
        await until(pilot, lambda: bool(app.main.query(DegenerationWarning)))
        warning = app.main.query_one(DegenerationWarning)
        assert warning.pattern != "none"
        await pilot.click("#stop-degenerate")
        await until(pilot, lambda: agent.cancels == 1)
        hold.set()
        await until(pilot, lambda: not app.main.turn_running)


async def test_f2_toggles_the_engine_panel_and_its_buttons_work(app_factory: AppFactory) -> None:
    engine = ScriptedEngine(
        current=EngineStatus(state="stopped"),
        on_start=[
            EngineStatus(state="booting", phase="loading weights", log_tail=["Loading weights"]),
            READY,
        ],
    )
    engine.pagemath_text = "hits land on multiples of 7168 tokens"
    app, _, _ = app_factory(engine=engine)
    async with app.run_test(size=(110, 30)) as pilot:
        await pilot.press("f2")
        assert app.main.engine_panel_shown
        panel = app.main.query_one(EnginePanel)
        await until(pilot, lambda: panel.view is not None and panel.view.status.state == "stopped")
        facts = str(panel.query_one("#engine-facts").render())
        assert "stopped" in facts and "multiples of 7168 tokens" in facts
        await pilot.click("#engine-start")
        await until(pilot, lambda: engine.starts == 1)
        await until(pilot, lambda: "ready" in str(panel.query_one("#engine-facts").render()))
        assert panel.query_one("#engine-start").disabled
        await pilot.click("#engine-stop")
        await until(pilot, lambda: engine.stops == 1)
        await until(pilot, lambda: "stopped" in str(panel.query_one("#engine-facts").render()))
        await pilot.press("f2")
        assert not app.main.engine_panel_shown


async def test_the_engine_panel_shows_pool_coverage_and_live_swaps(app_factory: AppFactory) -> None:
    ready = EngineStatus(
        state="ready",
        profile="glm53-flash-spark",
        plugin=[
            "w2_quant: applied (quantization method 'sparkcode_w2' registered)",
            "fp4_pool: active (151 experts at 4 bits; live coverage 41.2% of 9000 routed tokens)",
            "fp4_reselect: live (3 swaps in 40 checks; last: layer 7 expert 12 in, expert 3 out; "
            "600 candidates, 7.91 GiB on the host)",
        ],
    )
    app, _, _ = app_factory(engine=ScriptedEngine(current=ready), show_engine_panel=True)
    async with app.run_test(size=(110, 30)) as pilot:
        panel = app.main.query_one(EnginePanel)
        await until(pilot, lambda: panel.view is not None and panel.view.status.state == "ready")
        facts = str(panel.query_one("#engine-facts").render())
        assert "fp4 pool" in facts
        assert "151 at 4 bits, coverage 41.2% · 3 live swaps" in facts


async def test_crashed_engine_shows_exit_code_and_log_tail(app_factory: AppFactory) -> None:
    crashed = EngineStatus(
        state="crashed",
        profile="cpu-demo",
        exit_code=1,
        log_tail=["Traceback (most recent call last):", "RuntimeError: out of memory"],
    )
    app, _, _ = app_factory(engine=ScriptedEngine(current=crashed), show_engine_panel=True)
    async with app.run_test(size=(110, 30)) as pilot:
        panel = app.main.query_one(EnginePanel)
        await until(pilot, lambda: panel.view is not None and panel.view.status.state == "crashed")
        assert "crashed (exit 1)" in str(panel.query_one("#engine-facts").render())
        assert list(panel.query_one("#engine-log", Log).lines)[-1] == "RuntimeError: out of memory"
        assert panel.has_class("-crashed")
        # A prompt now is refused with a way out, not sent.
        await type_line(pilot, "hello")
        await until(pilot, lambda: bool(app.main.query(ErrorMessage)))
        assert "engine is crashed" in texts(app, ErrorMessage)[0]
        assert app.main.prompt.value == "hello"  # refused, not lost


async def test_the_engine_panel_shows_a_dead_worker_node(app_factory: AppFactory) -> None:
    # vLLM's headless node exits 0 after one of its TP processes dies: the row quotes the
    # log line that says so (seen on real nodes, tests/e2e/test_two_nodes.py).
    died = (
        "(MainProcess pid=8807) ERROR 12-02 14:58:24 [multiproc_executor.py:315] Worker "
        "proc VllmWorker-1 died unexpectedly (exit code: -9), shutting down executor."
    )
    degraded = EngineStatus(
        state="degraded",
        profile="tiny2",
        healthy=True,
        log_tail=["head line"],
        nodes=[
            NodeStatus(
                name="worker",
                state="exited",
                where="ssh spark2",
                exit_code=0,
                log_tail=[died, "(MainProcess pid=8807) INFO all workers exited"],
            )
        ],
    )
    app, _, _ = app_factory(engine=ScriptedEngine(current=degraded), show_engine_panel=True)
    async with app.run_test(size=(110, 30)) as pilot:
        panel = app.main.query_one(EnginePanel)
        await until(pilot, lambda: panel.view is not None and panel.view.status.state == "degraded")
        facts = str(panel.query_one("#engine-facts").render())
        assert "degraded (a node is down)" in facts
        assert (
            "worker exited (exit 0) · ssh spark2 · ERROR 12-02 14:58:24 "
            "[multiproc_executor.py:315] Worker proc VllmWorker-1 died unexpectedly "
            "(exit code: -9)"
        ) in " ".join(facts.split())
        assert list(panel.query_one("#engine-log", Log).lines)[-3:] == [
            "head line",
            f"[worker] {died}",
            "[worker] (MainProcess pid=8807) INFO all workers exited",
        ]
        assert panel.has_class("-crashed")
        # A prompt is refused with the way out that works (Start is disabled while the
        # head runs), and what was typed stays in the prompt.
        await type_line(pilot, "hello")
        await until(pilot, lambda: bool(app.main.query(ErrorMessage)))
        error = texts(app, ErrorMessage)[0]
        assert "a node is down" in error and "press Stop there, then Start" in error
        assert app.main.prompt.value == "hello"


async def test_auto_start_and_a_prompt_queued_while_booting(app_factory: AppFactory) -> None:
    engine = ScriptedEngine(
        current=EngineStatus(state="stopped"),
        on_start=[
            EngineStatus(state="booting", phase="starting"),
            EngineStatus(state="booting", phase="loading weights"),
        ],
    )
    app, agent, _ = app_factory([answer_script("ready now")], engine=engine, auto_start=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: engine.starts == 1)
        await until(pilot, lambda: app.engine_view.status.phase == "loading weights")
        await type_line(pilot, "early question")
        await until(pilot, lambda: any("goes out" in t for t in texts(app, Notice)))
        assert agent.turns_run == 0
        engine.current = READY
        await until(pilot, lambda: agent.turns_run == 1)
        await until(pilot, lambda: not app.main.turn_running)
        assert agent.prompts == ["early question"]
        assert texts(app, UserMessage) == ["early question"]
        assert any("goes out when it is ready" in t for t in texts(app, Notice))


async def test_command_palette_lists_the_main_actions(app_factory: AppFactory) -> None:
    app, _, _ = app_factory()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        titles = [c.title for c in app.get_system_commands(app.main)]
        for wanted in (
            "Engine panel",
            "Start engine",
            "Stop engine",
            "Clear conversation",
            "Undo last turn",
            "Approval mode: full-auto",
            "Reasoning effort: max",
        ):
            assert wanted in titles
        await pilot.press("ctrl+p")
        await until(pilot, lambda: app.screen is not app.main)
        await pilot.press(*"Engine pan")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await until(pilot, lambda: app.main.engine_panel_shown)


async def test_footer_shows_the_bindings(app_factory: AppFactory) -> None:
    app, _, _ = app_factory()
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        keys = {
            active.binding.key
            for active in app.screen.active_bindings.values()
            if active.enabled and active.binding.show
        }
        assert {"f2", "ctrl+t", "ctrl+l"} <= keys


async def test_auto_start_never_restarts_an_engine_the_user_stopped(
    app_factory: AppFactory,
) -> None:
    engine = ScriptedEngine(current=READY)
    app, _, _ = app_factory(engine=engine, auto_start=True, show_engine_panel=True)
    async with app.run_test(size=(110, 30)) as pilot:
        await until(pilot, lambda: app.engine_view.status.state == "ready")
        await pilot.click("#engine-stop")
        await until(pilot, lambda: app.engine_view.status.state == "stopped")
        await pilot.pause(0.5)  # several polls
        assert engine.starts == 0 and app.engine_view.status.state == "stopped"


async def test_a_stream_the_agent_stopped_as_degenerate_says_so(app_factory: AppFactory) -> None:
    async def stopped(agent: Any, text: str) -> AsyncIterator[ev.Event]:
        yield ev.TurnStarted(turn=1, user_text=text)
        yield ev.RequestStarted(
            request=1, reasoning_effort="low", thinking_token_budget=None, messages=2
        )
        yield ev.ContentDelta(text="loop loop ")
        yield ev.DegenerationDetected(
            channel="content",
            pattern="phrase_loop",
            detail="a phrase repeated 12 times",
            chars=400,
            stopped=True,
        )
        yield ev.TurnFinished(
            reason="degenerate",
            content="loop loop ",
            requests=1,
            prompt_tokens=5,
            completion_tokens=9,
        )

    app, agent, _ = app_factory([stopped])
    async with app.run_test(size=(100, 30)) as pilot:
        await type_line(pilot, "/degenerate warn")
        await type_line(pilot, "talk")
        await until(pilot, lambda: not app.main.turn_running and agent.turns_run == 1)
        assert agent.degenerate_mode == "warn"  # applied when the agent was built
        warning = app.main.query_one(DegenerationWarning)
        assert warning.pattern == "phrase_loop" and "content, stopped" in warning.detail
        assert not app.main.query("#stop-degenerate")  # already stopped: nothing to press
        assert any("the stream degenerated" in t for t in texts(app, Notice))
