"""Save ``docs/images/tui.svg``: the TUI mid-turn, for the README.

Runs the real app headless (Textual's Pilot) over the scripted agent and engine the
TUI tests use (``sparkcode/tui/scripted.py``), so no model or engine is needed and the
picture is the same on every machine: a prompt sent, the model's thinking, a
``read_file`` call and its result, the answer streaming, tok/s in the status bar.

    .venv/bin/python scripts/screenshot.py [OUT.svg]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from engine.paths import Paths
from engine.supervisor import EngineStatus
from sparkcode.agent.core import events as ev
from sparkcode.tui import SparkcodeApp, TuiSettings
from sparkcode.tui.agent_port import AgentPort, SessionRequest
from sparkcode.tui.scripted import ScriptedAgent, ScriptedEngine, TurnScript, chunks
from sparkcode.tui.widgets import ThinkingBlock

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "images" / "tui.svg"
SIZE = (110, 32)
PROMPT = "test_calc.py fails. Run the tests, fix the bug in calc.py, then run them again."
THINKING = (
    "The test fails on add(2, 3). I should read calc.py before editing it, then "
    "make the smallest change and run the tests again."
)
CALC = "def add(a: int, b: int) -> int:\n    return a - b\n"
ANSWER = "calc.py's `add` subtracts: `return a - b`. I will change it to `return a + b` and "
ENGINE = EngineStatus(
    state="ready",
    pid=4242,
    port=8400,
    profile="cpu-coder",
    model="qwen2.5-coder-1.5b-instruct",
    healthy=True,
    base_url="http://127.0.0.1:8400/v1",
    memory_rss_bytes=3 * 2**30,
)


def _usage(completion: int, reasoning: int, *, prompt: int) -> ev.UsageUpdate:
    return ev.UsageUpdate(
        prompt_tokens=prompt,
        completion_tokens=completion,
        reasoning_tokens=reasoning,
        ttft_s=1.9,
        decode_tok_s=23.0,
        prefill_tok_s=296.0,
        context_used=prompt + completion,
        context_limit=16384,
        cached_tokens=prompt - 96,
    )


def turn_script(reached: asyncio.Event, hold: asyncio.Event) -> TurnScript:
    """One turn: think, read calc.py, start answering, set ``reached``, wait on ``hold``."""

    async def run(agent: ScriptedAgent, text: str) -> AsyncIterator[ev.Event]:
        yield ev.TurnStarted(turn=agent.turns_run, user_text=text)
        yield ev.RequestStarted(
            request=1, reasoning_effort="low", thinking_token_budget=1536, messages=2
        )
        done = 0
        for piece in chunks(THINKING, 4):
            done += 1
            yield ev.ReasoningDelta(text=piece, tokens_so_far=done, budget=1536)
        args = {"path": "calc.py"}
        yield ev.ToolCallStarted(
            call_id="call-1", name="read_file", arguments=args, raw_arguments='{"path": "calc.py"}'
        )
        yield ev.ToolCallFinished(call_id="call-1", name="read_file", result=CALC, duration_s=0.01)
        yield _usage(done + 12, done, prompt=1480)
        yield ev.RequestStarted(
            request=2, reasoning_effort="low", thinking_token_budget=1536, messages=4
        )
        for piece in chunks(ANSWER, 4):
            done += 1
            yield ev.ContentDelta(text=piece)
        yield _usage(done, done - len(chunks(ANSWER, 4)), prompt=1552)
        yield ev.MetricsUpdate(
            acceptance_length=None, prefix_cache_hit_rate=0.94, kv_cache_usage=0.04
        )
        reached.set()
        await hold.wait()
        yield ev.TurnFinished(
            reason="stop", content=ANSWER, requests=2, prompt_tokens=1552, completion_tokens=done
        )

    return run


async def capture(out: Path, workspace: Path) -> str:
    """Drive the app to mid-turn, save the SVG to ``out`` and return its text."""
    reached, hold = asyncio.Event(), asyncio.Event()
    agent = ScriptedAgent(
        [turn_script(reached, hold)], model="qwen2.5-coder-1.5b-instruct", workspace=workspace
    )

    async def factory(request: SessionRequest) -> AgentPort:
        return agent

    settings = TuiSettings(
        workspace=workspace,
        paths=Paths.from_env(),
        model=agent.model,
        auto_start=False,
        poll_s=0.1,
        idle_poll_s=0.1,
    )
    app = SparkcodeApp(settings, ScriptedEngine(current=ENGINE, profile_name="cpu-coder"), factory)
    async with app.run_test(size=SIZE) as pilot:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while app.engine_view.status.state != "ready":
            if loop.time() > deadline:
                raise TimeoutError("the scripted engine never showed as ready")
            await pilot.pause(0.05)
        app.main.prompt.value = PROMPT
        await pilot.press("enter")
        while not reached.is_set():
            if loop.time() > deadline:
                raise TimeoutError("the scripted turn never reached its answer")
            await pilot.pause(0.05)
        for block in app.main.query(ThinkingBlock):
            block.collapsed = False  # as a click on "thinking" leaves it
        app.main.prompt.cursor_blink = False
        await pilot.pause(0.3)
        svg = app.export_screenshot(title="sparkcode")
        hold.set()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(svg, encoding="utf-8")
    return svg


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else OUT
    with tempfile.TemporaryDirectory(prefix="sparkcode-shot-") as tmp:
        workspace = Path(tmp) / "calc"
        workspace.mkdir()
        (workspace / "calc.py").write_text(CALC)
        asyncio.run(capture(out, workspace))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
