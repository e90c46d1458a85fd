"""The agent suite: each try of each task is one real agent turn in a fresh git
workspace, then the task's check (:mod:`._agent_tasks`).

A try goes through the one session builder (:mod:`sparkcode.start`) exactly
as ``sparkcode run`` and the TUI do, so a profile's agent settings (small-model
mode, sampling, thinking budget) apply unchanged; what the bench fixes instead
of ``config.toml`` (which it does not read, so a user's rules and MCP servers
cannot change the figures): permission mode ``sandbox`` (shell commands in
bubblewrap, edits confined to the workspace) with every remaining approval
answered yes except a shell command outside the sandbox and a repeated-call
loop, the session seed (``--seed`` + try - 1), ``--max-turns`` and
``--max-tokens``; a try still running after ``--try-timeout`` seconds is
stopped (ended by ``timeout``) and checked as it stands, so one runaway
generation on a slow CPU cannot hold the suite for an hour. Tries start task by
task for try 1, then try 2..., so a run cut short has every task measured once
before any twice (``--until-pass`` skips a task's later tries once one passed, which
leaves pass@n as it is); ``--jobs N`` runs N of them at a time (wall times then include
waiting on the others' requests). A failed try keeps
its recorded session (``sparkcode replay ID``); passed ones are deleted unless
``--keep-sessions``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import UserError
from engine.paths import Paths
from engine.profiles import AgentKnobs
from engine.supervisor import Supervisor
from sparkcode.agent import (
    AgentError,
    ApprovalDecision,
    ApprovalRequested,
    DegenerationDetected,
    Event,
    Notice,
    ToolCallStarted,
    TurnFinished,
    check_call,
)
from sparkcode.agent.tools import Sandbox, ToolRegistry, find_bwrap
from sparkcode.agent.wire.client import ToolCall
from sparkcode.config import Config, DiagnosticsConfig
from sparkcode.start import SessionOptions, StartTarget, build_session, resolve_target

from ._agent_tasks import Task, check, load_tasks, make_workspace, select, workspace_diff
from ._run import Context
from ._target import TargetSpec

ANSWER_CAP = 2000
FINAL = ("stop", "length")
"""Turns that ended on the model's answer (``length``: cut at ``--max-tokens``). Only
such an answer is checked: the text a turn stopped on otherwise (max_turns, a loop, a
timeout) is a reply that also called a tool, in small-model mode the raw JSON step,
and words in it (a grep pattern naming the failing test) are no answer."""


def settings_from(
    tasks: list[str] | None,
    kinds: list[str] | None,
    tries: int,
    seed: int,
    max_turns: int,
    max_tokens: int | None,
    try_timeout: float,
    structured_tools: bool | None,
    sandbox: bool,
    keep_sessions: bool,
    jobs: int = 1,
    diagnostics: bool = True,
    until_pass: bool = False,
) -> dict[str, Any]:
    if (
        tries < 1
        or max_turns < 1
        or (max_tokens is not None and max_tokens < 1)
        or jobs < 1
        or try_timeout <= 0
    ):
        raise UserError(
            "--tries, --max-turns, --max-tokens and --jobs must be >= 1, --try-timeout > 0"
        )
    if sandbox and find_bwrap().path is None:
        raise UserError(
            f"the agent suite runs the model's shell commands and the tasks' "
            f"checks in the bubblewrap sandbox, and {find_bwrap().reason}; pass "
            "--no-sandbox to run them unconfined (in throwaway workspaces)"
        )
    ids = select(tasks, kinds)
    known = load_tasks()
    return {
        "task_ids": ids,
        "task_digests": {t: known[t].digest for t in ids},
        "tries": tries,
        "seed": seed,
        "max_turns": max_turns,
        "max_tokens": max_tokens,
        "try_timeout_s": try_timeout,
        "structured_tools": structured_tools,
        "sandbox": sandbox,
        "keep_sessions": keep_sessions,
        "jobs": jobs,
        "diagnostics": diagnostics,
        "until_pass": until_pass,
        "python": sys.executable,
    }


def check_resumable(settings: dict[str, Any]) -> None:
    """A saved run's tasks must still exist and be the same (a newer sparkcode may
    have changed them): figures from two versions of a task are not one column."""
    known = load_tasks()
    gone = [t for t in settings["task_ids"] if t not in known]
    changed = [
        t for t, d in settings["task_digests"].items() if t in known and known[t].digest != d
    ]
    if gone or changed:
        raise UserError(
            "this run cannot be resumed: its tasks changed since it started ("
            + "; ".join(
                p
                for p in (
                    f"gone: {', '.join(gone)}" if gone else "",
                    f"changed: {', '.join(changed)}" if changed else "",
                )
                if p
            )
            + "); start a new run"
        )


def unit_key(task_id: str, attempt: int) -> str:
    return f"{task_id}#{attempt}"


def passed_before(units: dict[str, Any], task_id: str, attempt: int) -> bool:
    """An earlier try of the task passed (``--until-pass`` skips the later ones)."""
    return any(units.get(unit_key(task_id, n), {}).get("success") for n in range(1, attempt))


def keys(settings: dict[str, Any]) -> list[str]:
    """Every try's key, try-major (all tasks once, then again)."""
    return [unit_key(t, n) for n in range(1, settings["tries"] + 1) for t in settings["task_ids"]]


@dataclass
class Tally:
    """What one try's events add up to."""

    registry: ToolRegistry
    tools: Counter[str] = field(default_factory=Counter)
    calls: int = 0
    malformed: int = 0
    """Calls the agent refused before running: not JSON, an unknown tool, a
    missing or mistyped argument (:func:`~sparkcode.agent.check_call`)."""
    salvaged: int = 0
    """Replies whose calls were recovered from the text (``tool_call_salvaged``)."""
    degenerate: bool = False
    error: str | None = None
    error_code: str | None = None
    reason: str | None = None
    answer: str = ""
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def see(self, event: Event) -> None:
        if isinstance(event, ToolCallStarted):
            self.calls += 1
            self.tools[event.name or "?"] += 1
            call = ToolCall(
                index=0, id=event.call_id, name=event.name, arguments=event.raw_arguments
            )
            self.malformed += check_call(call, self.registry).error is not None
        elif isinstance(event, Notice) and event.code == "tool_call_salvaged":
            self.salvaged += 1
        elif isinstance(event, DegenerationDetected) and event.stopped:
            self.degenerate = True
        elif isinstance(event, AgentError):
            self.error, self.error_code = event.message, event.code
        elif isinstance(event, TurnFinished):
            self.reason, self.answer = event.reason, event.content
            self.requests = event.requests
            self.prompt_tokens, self.completion_tokens = (
                event.prompt_tokens,
                event.completion_tokens,
            )


async def approve(request: ApprovalRequested) -> ApprovalDecision:
    """Yes to what stays in the workspace (edits, commits); no to a shell command
    outside the sandbox and to going on with a loop of identical calls."""
    if request.kind == "loop":
        return ApprovalDecision(approved=False, reason="stopped: the same call was repeated")
    if request.kind == "shell":
        return ApprovalDecision(
            approved=False,
            by="rule",
            reason=(
                "the benchmark runs shell commands only inside the sandbox; run it again "
                "without sandbox: false"
            ),
        )
    return ApprovalDecision(approved=True)


def start_target(
    spec: TargetSpec,
    running_profile: str | None,
    base_url: str,
    model: str,
    api_key_env: str | None,
    ws: Path,
    paths: Paths,
    diagnostics: bool = True,
) -> StartTarget:
    """The builder's target for one try: the profile (its agent settings apply) or
    the endpoint, with ``config.toml``'s defaults rather than the user's file, but for
    ``--no-diagnostics`` (edit results without the language server's problems)."""
    config = Config(diagnostics=DiagnosticsConfig(enabled=diagnostics))
    if spec.kind == "profile":
        return resolve_target(ws, paths, profile=spec.name, config=config)
    if spec.kind == "running" and running_profile:
        return resolve_target(ws, paths, profile=running_profile, config=config)
    return resolve_target(
        ws, paths, endpoint=base_url, model=model, api_key_env=api_key_env, config=config
    )


@contextlib.contextmanager
def python_first() -> Iterator[None]:
    """The bench's interpreter first on PATH while tries run, so ``python -m
    unittest`` in the agent's shell runs the same Python as the checks (a
    virtualenv's ``bin``, as if activated)."""
    old = os.environ.get("PATH", "")
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + old
    try:
        yield
    finally:
        os.environ["PATH"] = old


async def one_try(
    ctx: Context, paths: Paths, task: Task, attempt: int, start: Any
) -> dict[str, Any]:
    s = ctx.settings
    seed = int(s["seed"]) + attempt - 1
    root = Path(tempfile.mkdtemp(prefix="sparkcode-bench-agent-"))
    sandbox = Sandbox(find_bwrap().path or "") if s["sandbox"] else None
    try:
        ws = make_workspace(task, root / task.id)
        session = await build_session(
            start(ws),
            SessionOptions(
                origin="bench-agent",
                record=True,
                permission_mode="sandbox" if s["sandbox"] else "full-auto",
                approver=approve,
                seed=seed,
                knobs=AgentKnobs(
                    max_turns=s["max_turns"],
                    max_tokens=s["max_tokens"],
                    structured_tools=s["structured_tools"],
                ),
                start_engine=False,
                mcp=False,
            ),
            paths,
        )
        tally = Tally(session.agent.tools)
        began = time.monotonic()
        try:
            async with asyncio.timeout(float(s["try_timeout_s"])):
                async for event in session.agent.run_turn(task.prompt):
                    tally.see(event)
        except TimeoutError:
            tally.reason = "timeout"  # checked as it stands: the work done so far counts
        finally:
            wall = time.monotonic() - began
            await session.aclose()
            if session.agent.undo_store is not None:  # one snapshot store per workspace
                shutil.rmtree(session.agent.undo_store.git_dir, ignore_errors=True)
        if tally.error_code == "engine_gone":
            raise UserError(f"{ctx.label}: {task.id} try {attempt}: {tally.error}")
        checked = time.monotonic()
        final = tally.reason in FINAL
        failed = check(task, ws, tally.answer if final else "", sandbox)
        if not final and task.check.answer:
            failed.append(f"no final answer: the turn ended by {tally.reason}")
        check_s = time.monotonic() - checked
        diff = workspace_diff(ws)
    finally:
        if sandbox is not None:
            sandbox.cleanup()
        shutil.rmtree(root, ignore_errors=True)
    keep = bool(failed) or s["keep_sessions"]
    recorder = session.recorder
    if recorder is not None and not keep:
        with contextlib.suppress(FileNotFoundError):
            recorder.path.unlink()
    return {
        "task": task.id,
        "kind": task.kind,
        "try": attempt,
        "seed": seed,
        "success": not failed,
        "failed": failed,
        "reason": tally.reason,
        "answer": tally.answer[:ANSWER_CAP],
        "requests": tally.requests,
        "tool_calls": tally.calls,
        "malformed_calls": tally.malformed,
        "salvaged_replies": tally.salvaged,
        "tools": dict(tally.tools),
        "degenerate": tally.degenerate,
        "error": tally.error,
        "prompt_tokens": tally.prompt_tokens,
        "completion_tokens": tally.completion_tokens,
        "wall_s": round(wall, 3),
        "check_s": round(check_s, 3),
        "diff": diff,
        "session": session.session_id
        if keep and recorder is not None and recorder.path.exists()
        else None,
        "host_load_1m": round(os.getloadavg()[0], 2),
    }


async def run(ctx: Context) -> None:
    paths = ctx.paths
    tasks = load_tasks()
    spec = TargetSpec.from_json(ctx.result.target(ctx.label)["spec"])
    running = Supervisor(paths).status().profile if spec.kind == "running" else None
    target = ctx.target

    def start(ws: Path) -> StartTarget:
        return start_target(
            spec,
            running,
            target.base_url,
            target.model,
            target.api_key_env,
            ws,
            paths,
            bool(ctx.settings.get("diagnostics", True)),
        )

    order = keys(ctx.settings)
    bar = ctx.bar("agent", order)
    slots = asyncio.Semaphore(int(ctx.settings.get("jobs", 1)))

    until_pass = bool(ctx.settings.get("until_pass", False))

    async def one(key: str) -> None:
        async with slots:
            task_id, _, attempt = key.rpartition("#")
            if until_pass and passed_before(ctx.result.units(ctx.label), task_id, int(attempt)):
                bar.advance(f"{ctx.label}: agent {key} skipped (an earlier try passed)")
                return  # not recorded: pass@n counts the tries made
            unit = await one_try(ctx, paths, tasks[task_id], int(attempt), start)
        ctx.result.put(ctx.label, key, unit)  # saved at once: Ctrl-C keeps it
        bar.advance(f"{ctx.label}: agent {key} " + ("pass" if unit["success"] else "fail"))

    with python_first():
        # --jobs N: N tries at a time against the one target (vLLM batches them; on a
        # CPU decode is memory-bound, so a few sequences cost little more than one).
        # They start in try-major order; an error or Ctrl-C cancels the others.
        async with asyncio.TaskGroup() as group:
            for key in order:
                if not ctx.result.done(ctx.label, key):
                    group.create_task(one(key))
