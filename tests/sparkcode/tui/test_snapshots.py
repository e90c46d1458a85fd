"""Snapshots of the main screen's states (pytest-textual-snapshot).

Everything shown comes from a scripted agent and engine: no clocks, no
temporary paths, fixed terminal sizes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from engine.supervisor import EngineStatus
from sparkcode.tui import SparkcodeApp
from sparkcode.tui.scripted import ScriptedEngine, answer_script, edit_script
from sparkcode.tui.widgets import ApprovalCard, EnginePanel, ThinkingBlock

from .conftest import make_app

SIZE = (110, 34)
SnapCompare = Callable[..., bool]
DIFF = (
    "--- a/src/main.py\n+++ b/src/main.py\n@@ -1,3 +1,3 @@\n import sys\n"
    "-print('hi')\n+print('hello, world')\n sys.exit(0)\n"
)
THINKING = (
    "The user wants the greeting changed. I should read src/main.py first, then make "
    "the smallest edit and keep the exit code as it is."
)


async def settle(pilot: Pilot[Any], condition: Callable[[], bool]) -> None:
    """Run until ``condition`` holds, then let pending renders flush."""
    app = pilot.app
    assert isinstance(app, SparkcodeApp)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while not condition():
        assert loop.time() < deadline
        await pilot.pause(0.05)
    app.main.prompt.cursor_blink = False
    await pilot.pause(0.3)


async def send(pilot: Pilot[Any], text: str) -> None:
    app = pilot.app
    assert isinstance(app, SparkcodeApp)
    app.main.prompt.value = text
    await pilot.press("enter")


def test_idle(snap_compare: SnapCompare, workspace: Path) -> None:
    app, _, _ = make_app(workspace)

    async def run_before(pilot: Pilot[Any]) -> None:
        await settle(pilot, lambda: app.engine_view.status.state == "ready")

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_streaming_with_thinking(snap_compare: SnapCompare, workspace: Path) -> None:
    hold = asyncio.Event()
    app, _, _ = make_app(
        workspace, [answer_script("never shown", thinking=THINKING, hold_after_thinking=hold)]
    )

    async def run_before(pilot: Pilot[Any]) -> None:
        await send(pilot, "change the greeting in src/main.py")
        await settle(
            pilot,
            lambda: (
                bool(app.main.query(ThinkingBlock))
                and "exit code" in app.main.query_one(ThinkingBlock).text
            ),
        )

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_tool_approval_card(snap_compare: SnapCompare, workspace: Path) -> None:
    app, _, _ = make_app(workspace, [edit_script("src/main.py", DIFF)])

    async def run_before(pilot: Pilot[Any]) -> None:
        await send(pilot, "change the greeting")
        await settle(pilot, lambda: bool(app.main.query(ApprovalCard)))

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def _engine_snapshot(snap_compare: SnapCompare, workspace: Path, status: EngineStatus) -> bool:
    app, _, _ = make_app(workspace, engine=ScriptedEngine(current=status), show_engine_panel=True)

    async def run_before(pilot: Pilot[Any]) -> None:
        panel = app.main.query_one(EnginePanel)
        await settle(
            pilot, lambda: panel.view is not None and panel.view.status.state == status.state
        )

    return snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_engine_panel_booting(snap_compare: SnapCompare, workspace: Path) -> None:
    status = EngineStatus(
        state="booting",
        pid=4242,
        port=8400,
        profile="cpu-demo",
        phase="loading weights",
        model="smollm2-135m-instruct",
        base_url="http://127.0.0.1:8400/v1",
        memory_rss_bytes=int(1.6 * 2**30),
        log_tail=[
            "INFO vLLM API server version 0.32.0",
            "INFO Initializing a V1 LLM engine",
            "INFO Starting to load model /models/smollm2-135m-instruct...",
        ],
    )
    assert _engine_snapshot(snap_compare, workspace, status)


def test_engine_panel_crashed(snap_compare: SnapCompare, workspace: Path) -> None:
    status = EngineStatus(
        state="crashed",
        pid=4242,
        port=8400,
        profile="cpu-demo",
        exit_code=1,
        model="smollm2-135m-instruct",
        base_url="http://127.0.0.1:8400/v1",
        log_tail=[
            "INFO Loading weights took 0.41 seconds",
            "Traceback (most recent call last):",
            '  File "worker.py", line 88, in determine_available_memory',
            "RuntimeError: not enough memory for the KV cache (need 1.0 GiB)",
        ],
    )
    assert _engine_snapshot(snap_compare, workspace, status)
