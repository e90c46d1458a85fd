"""/jobs in the app over the real agent: the model's background job listed, stopped
from the prompt, and a job left running ended when the app closes."""

from __future__ import annotations

import json
from pathlib import Path

from textual.widgets import Markdown

from engine.paths import Paths
from sparkcode.tui.widgets import ErrorMessage, Notice
from tests.sparkcode.agent.tools.test_jobs import by_cmdline, group_members
from tests.support.scripted import Reply, ScriptedServer

from .conftest import live_app
from .test_pilot import texts, type_line, until


def background(command: str) -> Reply:
    return Reply(tool_calls=[("bash", json.dumps({"command": command, "background": True}))])


async def test_jobs_lists_the_models_job_and_stops_it(workspace: Path, paths: Paths) -> None:
    server = ScriptedServer([background("sleep 61.61"), Reply(content=["started"])])
    app = live_app(workspace, paths, server)
    async with app.run_test(size=(120, 40)) as pilot:
        await type_line(pilot, "/jobs")
        await until(
            pilot,
            lambda: any("the conversation has not started" in t for t in texts(app, ErrorMessage)),
        )
        await type_line(pilot, "start a watcher")
        await until(pilot, lambda: not app.main.turn_running and len(server.requests) == 2)
        assert len(by_cmdline("sleep", "61.61")) == 1
        await type_line(pilot, "/jobs")
        await until(pilot, lambda: bool(app.main.query(Markdown)))
        table = app.main.query(Markdown).last().source
        assert "| job | state | pid | where | output bytes | command |" in table
        assert "| 1 | running for " in table and "`sleep 61.61`" in table
        await type_line(pilot, "/jobs stop 2")
        await until(
            pilot,
            lambda: any(
                "there is no job 2; the jobs are: 1" in t for t in texts(app, ErrorMessage)
            ),
        )
        await type_line(pilot, "/jobs kill 1")
        await until(
            pilot, lambda: any("usage: /jobs [stop N]" in t for t in texts(app, ErrorMessage))
        )
        await type_line(pilot, "/jobs stop 1")
        await until(
            pilot,
            lambda: any(t.startswith("job 1 (stopped by job_stop") for t in texts(app, Notice)),
            timeout=10,
        )
        assert by_cmdline("sleep", "61.61") == []


async def test_closing_the_app_ends_a_running_job(workspace: Path, paths: Paths) -> None:
    server = ScriptedServer(
        [background("sleep 61.62 & sleep 61.62 & wait"), Reply(content=["started"])]
    )
    app = live_app(workspace, paths, server)
    async with app.run_test(size=(120, 40)) as pilot:
        await type_line(pilot, "start two watchers")
        await until(pilot, lambda: not app.main.turn_running and len(server.requests) == 2)
        assert len(by_cmdline("sleep", "61.62")) == 2
        agent = app.main.agent
        assert agent is not None
        pgid = agent.agent.jobs.get(1).pid  # type: ignore[attr-defined]
    assert by_cmdline("sleep", "61.62") == [] and group_members(pgid) == []
