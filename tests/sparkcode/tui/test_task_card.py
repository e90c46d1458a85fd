"""A ``task`` call's sub-conversation is folded inside the call's card, with its own
tool calls as cards; the card's result is the summary."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

from textual.widgets import Collapsible

from engine.paths import Paths
from sparkcode.agent.core import events as ev
from sparkcode.tui.scripted import ScriptedAgent
from sparkcode.tui.widgets import ToolCard
from sparkcode.tui.widgets.tool_card import TaskActivity

from .test_conversation_commands import app_with
from .test_pilot import type_line, until


def _nested(event: ev.Event) -> ev.TaskEvent:
    return ev.TaskEvent(call_id="t1", event=event)


async def _explore(agent: ScriptedAgent, text: str) -> AsyncIterator[ev.Event]:
    yield ev.TurnStarted(turn=1, user_text=text)
    yield ev.ToolCallStarted(
        call_id="t1", name="task", arguments={"prompt": "where is greet?"}, raw_arguments="{}"
    )
    yield _nested(ev.TurnStarted(turn=1, user_text="where is greet?"))
    yield _nested(
        ev.RequestStarted(request=1, reasoning_effort="low", thinking_token_budget=None, messages=2)
    )
    yield _nested(
        ev.ToolCallStarted(
            call_id="i1", name="grep", arguments={"pattern": "greet"}, raw_arguments="{}"
        )
    )
    yield _nested(ev.ToolCallFinished(call_id="i1", name="grep", result="hello.py:1"))
    yield _nested(
        ev.ToolCallStarted(
            call_id="i2", name="write_file", arguments={"path": "x"}, raw_arguments="{}"
        )
    )
    yield _nested(
        ev.ApprovalResolved(
            call_id="i2", tool="write_file", approved=False, by="mode", reason="read-only"
        )
    )
    yield _nested(
        ev.ToolCallFinished(call_id="i2", name="write_file", result="refused", error="refused")
    )
    yield _nested(
        ev.RequestStarted(request=2, reasoning_effort="low", thinking_token_budget=None, messages=5)
    )
    yield _nested(ev.ContentDelta(text="greet is in hello.py"))
    yield _nested(
        ev.TurnFinished(
            reason="stop",
            content="greet is in hello.py",
            requests=2,
            prompt_tokens=1,
            completion_tokens=1,
        )
    )
    yield ev.ToolCallFinished(call_id="t1", name="task", result="greet is in hello.py")
    yield ev.TurnFinished(
        reason="stop", content="", requests=1, prompt_tokens=1, completion_tokens=1
    )


async def test_a_task_is_folded_inside_its_card(workspace: Path, paths: Paths) -> None:
    app, _ = app_with(workspace, paths, ScriptedAgent([_explore]))
    async with app.run_test(size=(100, 40)) as pilot:
        await type_line(pilot, "explain greet")
        await until(
            pilot,
            lambda: any(c.tool == "task" and c.state == "done" for c in app.main.query(ToolCard)),
        )
        task = next(c for c in app.main.query(ToolCard) if c.tool == "task")
        activity = task.activity
        assert isinstance(activity, TaskActivity) and activity.collapsed
        assert activity.title == "explore: 2 requests, 2 tool calls, done"
        assert [(c.tool, c.state) for c in activity.cards.values()] == [
            ("grep", "done"),
            ("write_file", "denied"),
        ]
        assert activity.query_one(Collapsible.Contents).query(ToolCard)
        # The sub-conversation's answer is the task's result, not a message of its own.
        assert not [
            c
            for c in app.main.query(ToolCard)
            if c.tool == "grep" and c.parent is app.main.query_one("Conversation")
        ]
