"""A scripted agent and engine: drive the real widgets without a model.

Tests, snapshot tests and the CPU benchmark use these so what they render is
deterministic; the events are the agent's own event types.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from engine.supervisor import EngineStatus
from sparkcode.agent.core import events as ev
from sparkcode.agent.core.images import ImageAttachment, load_image, refuse_text_only
from sparkcode.agent.core.watch import StreamWatch
from sparkcode.agent.tools import JobTable
from sparkcode.config import DegenerateMode

TurnScript = Callable[["ScriptedAgent", str], AsyncIterator[ev.Event]]
"""Yields the events of one turn, given the agent and the prompt."""


def chunks(text: str, size: int) -> list[str]:
    """``text`` cut into pieces of ``size`` characters (a stand-in for tokens)."""
    return [text[i : i + size] for i in range(0, len(text), size)]


def answer_script(
    answer: str,
    *,
    thinking: str = "",
    budget: int | None = 1536,
    delay_s: float = 0.0,
    chunk: int = 4,
    hold: asyncio.Event | None = None,
    prompt_tokens: int = 120,
    ttft_s: float = 0.25,
    decode_tok_s: float = 42.0,
    hold_after_thinking: asyncio.Event | None = None,
) -> TurnScript:
    """A turn that thinks, answers and reports usage, one token every ``delay_s``.

    The answer is watched as the agent watches it (:class:`StreamWatch` under the
    agent's ``degenerate_mode``): a degenerate one is reported, and in ``stop``
    mode the turn ends there with reason ``degenerate``. With ``hold`` the stream
    pauses before finishing (``hold_after_thinking``: before answering) until the
    event is set, so a test can look at the screen mid-stream.
    """

    async def run(agent: ScriptedAgent, text: str) -> AsyncIterator[ev.Event]:
        yield ev.TurnStarted(turn=agent.turns_run, user_text=text)
        yield ev.RequestStarted(
            request=1,
            reasoning_effort=agent.reasoning_effort,
            thinking_token_budget=budget,
            messages=2,
        )
        completion = 0
        for piece in chunks(thinking, chunk):
            completion += 1
            yield ev.ReasoningDelta(text=piece, tokens_so_far=completion, budget=budget)
            if completion % 8 == 0:
                yield _usage(prompt_tokens, completion, completion, ttft_s, decode_tok_s)
            if delay_s:
                await asyncio.sleep(delay_s)
        reasoning = completion
        if hold_after_thinking is not None:
            await hold_after_thinking.wait()
        watch = StreamWatch(cast(DegenerateMode, agent.degenerate_mode))
        for piece in chunks(answer, chunk):
            completion += 1
            yield ev.ContentDelta(text=piece)
            fired = watch.feed(piece, "")
            if fired is not None:
                yield fired
                if fired.stopped:
                    yield ev.TurnFinished(
                        reason="degenerate",
                        content=answer,
                        requests=1,
                        prompt_tokens=prompt_tokens,
                        completion_tokens=completion,
                    )
                    return
            if completion % 8 == 0:
                yield _usage(prompt_tokens, completion, reasoning, ttft_s, decode_tok_s)
            if delay_s:
                await asyncio.sleep(delay_s)
        if hold is not None:
            await hold.wait()
        yield _usage(prompt_tokens, completion, reasoning, ttft_s, decode_tok_s, final=True)
        yield ev.MetricsUpdate(
            acceptance_length=None, prefix_cache_hit_rate=0.5, kv_cache_usage=0.03
        )
        yield ev.TurnFinished(
            reason="stop",
            content=answer,
            requests=1,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion,
        )

    return run


def _usage(
    prompt: int,
    completion: int,
    reasoning: int,
    ttft_s: float,
    decode: float,
    *,
    final: bool = False,
) -> ev.UsageUpdate:
    return ev.UsageUpdate(
        prompt_tokens=prompt,
        completion_tokens=completion,
        reasoning_tokens=reasoning,
        ttft_s=ttft_s,
        decode_tok_s=decode,
        prefill_tok_s=prompt / ttft_s,
        context_used=prompt + completion,
        context_limit=8192,
        final=final,
    )


def edit_script(
    path: str, diff: str, *, kind: ev.ApprovalKind = "edit", answer: str = "Done."
) -> TurnScript:
    """A turn that asks to edit ``path`` (showing ``diff``) and reports the outcome."""

    async def run(agent: ScriptedAgent, text: str) -> AsyncIterator[ev.Event]:
        yield ev.TurnStarted(turn=agent.turns_run, user_text=text)
        yield ev.RequestStarted(
            request=1,
            reasoning_effort=agent.reasoning_effort,
            thinking_token_budget=agent.thinking_token_budget,
            messages=2,
        )
        args = {"path": path, "search": "old", "replace": "new"}
        yield ev.ToolCallStarted(
            call_id="call-1", name="edit_file", arguments=args, raw_arguments="{}"
        )
        future: asyncio.Future[ev.ApprovalDecision] = asyncio.get_running_loop().create_future()
        request = ev.ApprovalRequested(
            call_id="call-1",
            tool="edit_file",
            kind=kind,
            summary=f"edit {path}",
            detail=diff,
            future=future,
        )
        agent.approvals.append(request)
        yield request
        decision = await future
        yield ev.ApprovalResolved(
            call_id="call-1", tool="edit_file", approved=decision.approved, by="user"
        )
        if decision.approved:
            agent.edits_applied.append(path)
            yield ev.ToolCallFinished(
                call_id="call-1", name="edit_file", result=f"edited {path}", diff=diff
            )
            yield ev.ContentDelta(text=answer)
            yield ev.TurnFinished(
                reason="stop", content=answer, requests=2, prompt_tokens=100, completion_tokens=20
            )
        else:
            yield ev.ToolCallFinished(
                call_id="call-1", name="edit_file", result="denied by the user", error="denied"
            )
            yield ev.TurnFinished(
                reason="denied", content="", requests=1, prompt_tokens=100, completion_tokens=10
            )

    return run


def failing_script(message: str) -> TurnScript:
    """A turn that fails the way a dead engine does."""

    async def run(agent: ScriptedAgent, text: str) -> AsyncIterator[ev.Event]:
        yield ev.TurnStarted(turn=agent.turns_run, user_text=text)
        yield ev.AgentError(message=message, code="engine_gone")
        yield ev.TurnFinished(
            reason="error", content="", requests=1, prompt_tokens=0, completion_tokens=0
        )

    return run


@dataclass
class ScriptedAgent:
    """Plays one script per turn; records what the UI asked of it."""

    scripts: list[TurnScript]
    model: str = "scripted"
    reasoning_effort: str = "low"
    thinking_token_budget: int = 1536
    approval_mode: str = "ask"
    thinking_history: bool = False
    notes: list[str] = field(default_factory=list)
    session_id: str | None = None
    history: list[dict[str, object]] = field(default_factory=list)
    """What :meth:`transcript` returns after the system message (scripts may fill it)."""
    degenerate_mode: str = "stop"
    turns_run: int = 0
    prompts: list[str] = field(default_factory=list)
    approvals: list[ev.ApprovalRequested] = field(default_factory=list)
    edits_applied: list[str] = field(default_factory=list)
    undone: list[str] = field(default_factory=list)
    resets: int = 0
    cancels: int = 0
    closed: bool = False
    compactions: list[str] = field(default_factory=list)
    """The focus of each /compact."""
    shell_commands: list[str] = field(default_factory=list)
    """What ``!cmd`` asked to run (the scripted agent runs none)."""
    steering: list[str] = field(default_factory=list)
    """Messages steered into the running turn; a script may deliver them."""
    vision: bool = True
    """The model takes images (False: :meth:`load_image` refuses, as a text-only one)."""
    image_max_bytes: int = 5 * 1024 * 1024
    images: list[tuple[ImageAttachment, ...]] = field(default_factory=list)
    """The images each turn carried."""
    workspace: Path = field(default_factory=Path.cwd)
    jobs: JobTable = field(default_factory=JobTable)
    """Background jobs (a test starts real ones; ``/jobs`` lists and stops them)."""

    def set_model(self, name: str) -> None:
        self.model = name

    def set_reasoning_effort(self, effort: str) -> None:
        self.reasoning_effort = effort

    def set_thinking_token_budget(self, budget: int) -> None:
        self.thinking_token_budget = budget

    def set_approval_mode(self, mode: str) -> str | None:
        self.approval_mode = mode
        return None

    def set_thinking_history(self, on: bool) -> None:
        self.thinking_history = on

    def transcript(self) -> list[dict[str, Any]]:
        return [{"role": "system", "content": "scripted"}, *self.history]

    def set_degenerate_mode(self, mode: str) -> None:
        self.degenerate_mode = mode

    def load_image(self, path: Path, name: str | None = None) -> ImageAttachment:
        if not self.vision:
            raise refuse_text_only(self.model)
        full = path if path.is_absolute() else self.workspace / path
        return load_image(full, max_bytes=self.image_max_bytes, name=name or str(path))

    async def run_turn(
        self, text: str, images: Sequence[ImageAttachment] = ()
    ) -> AsyncIterator[ev.Event]:
        self.turns_run += 1
        self.prompts.append(text)
        self.images.append(tuple(images))
        if not self.scripts:
            raise RuntimeError("the scripted agent has no turn left")
        script = self.scripts.pop(0)
        async for event in script(self, text):
            yield event

    async def run_shell(self, command: str, serial: int = 0) -> AsyncIterator[ev.Event]:
        self.shell_commands.append(command)
        yield ev.Notice(
            message=f"!{command}: the scripted agent runs no shell command", code="user_shell"
        )

    def cancel(self) -> None:
        self.cancels += 1

    def steer(self, text: str) -> None:
        self.steering.append(text)

    async def compact(self, focus: str) -> AsyncIterator[ev.Event]:
        self.compactions.append(focus)
        yield ev.ContextCompacted(
            tokens_before=1000, tokens_after_estimate=100, messages_summarised=len(self.history)
        )

    def context_report(self) -> str:
        return "| part | tokens (est.) | of context |\n|---|---:|---:|\n| history | 10 | 0.1% |"

    def jobs_report(self) -> str:
        return self.jobs.table()

    async def stop_job(self, job_id: int) -> str:
        job = self.jobs.get(job_id)
        await self.jobs.stop(job)
        return job.describe()

    def take_steering(self) -> list[str]:
        texts, self.steering = self.steering, []
        return texts

    async def undo(self) -> str:
        if not self.edits_applied:
            return "nothing to undo"
        path = self.edits_applied.pop()
        self.undone.append(path)
        return f"undo: restored {path}"

    async def redo(self) -> str:
        if not self.undone:
            return "nothing to redo"
        path = self.undone.pop()
        self.edits_applied.append(path)
        return f"redo: {path} is back"

    def reset(self) -> None:
        self.resets += 1

    async def aclose(self) -> None:
        self.closed = True


@dataclass
class ScriptedEngine:
    """An engine whose status is whatever the test sets; records start/stop."""

    current: EngineStatus = field(default_factory=lambda: EngineStatus(state="stopped"))
    managed: bool = True
    profile_name: str | None = "cpu-demo"
    on_start: Sequence[EngineStatus] = ()
    """Statuses the engine takes, one per poll, after start() (then stays on the last)."""
    starts: int = 0
    stops: int = 0
    pagemath_text: str | None = None
    """What :meth:`pagemath` answers."""
    _queue: list[EngineStatus] = field(default_factory=list)

    def status(self) -> EngineStatus:
        if self._queue:
            self.current = self._queue.pop(0)
        return self.current

    def start(self, progress: Callable[[str], None]) -> None:
        self.starts += 1
        progress("launching scripted engine")
        self._queue = list(self.on_start)

    def stop(self) -> None:
        self.stops += 1
        self._queue.clear()
        self.current = EngineStatus(state="stopped")

    def pagemath(self, status: EngineStatus) -> str | None:
        return self.pagemath_text
