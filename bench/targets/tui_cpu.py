"""CPU the TUI spends rendering a 100 tok/s stream (target: at most 20% of one core).

A scripted agent streams thinking and a markdown answer (prose, lists, code
blocks) at a fixed token rate, with usage updates every 0.1 s the way the real
agent sends them, through the real app and widgets in a headless run. The todo
panel is shown the whole time (updated twice) and between thinking and answer
the model asks to run a command: the approval card appears and is answered, the
tool card shows its result. The figure is the process CPU time (not wall time)
over the wall time of the streaming parts (the approval wait is left out); the
idle app over the same clock is printed beside it, and the load average with
every figure (the machine is shared).

    .venv/bin/python -m bench.targets.tui_cpu [--rate 100] [--seconds 15] [--runs 3]

``--compare`` also runs the drawing path from before the extra layout passes
were removed (``legacy_drawing``), interleaved with today's run for run, and
prints the two side by side with their ratio. It ends with PASS or FAIL against
the target (exit status 0 or 1).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from engine.paths import Paths
from engine.supervisor import EngineStatus
from sparkcode.agent.core import events as ev
from sparkcode.tui import SparkcodeApp, TuiSettings
from sparkcode.tui.agent_port import AgentPort, SessionRequest
from sparkcode.tui.scripted import ScriptedAgent, ScriptedEngine, chunks
from sparkcode.tui.widgets.conversation import Conversation
from sparkcode.tui.widgets.markdown_lines import MarkdownLines

TARGET = 0.20
PARAGRAPH = (
    "The scheduler keeps a queue of waiting requests and admits them while the KV cache has "
    "free pages; a request that cannot get a page waits, so **throughput** depends on how "
    "fast pages come back. "
)
CODE = (
    "```python\n"
    "def admit(queue, pool):\n"
    "    while queue and pool.free_pages() >= queue[0].pages_needed:\n"
    "        request = queue.popleft()\n"
    "        pool.reserve(request)\n"
    "        yield request\n"
    "```\n\n"
)
LIST = "- first, measure the prefill\n- then the decode rate\n- and the cache hit rate\n\n"


def answer_text(tokens: int) -> str:
    """Markdown of about ``tokens`` four-character tokens."""
    parts: list[str] = []
    size = 0
    while size < tokens * 4:
        for block in (f"## Step {len(parts) + 1}\n\n", PARAGRAPH * 2 + "\n\n", LIST, CODE):
            parts.append(block)
            size += len(block)
    return "".join(parts)[: tokens * 4]


TODOS = (
    "read the scheduler",
    "measure the prefill",
    "measure the decode rate",
    "write the summary",
)


def todo_list(done: int) -> ev.TodoUpdated:
    """The plan with ``done`` items finished and the next one in progress."""
    return ev.TodoUpdated(
        items=tuple(
            ev.TodoItem(
                id=i + 1,
                text=text,
                status="done" if i < done else "in_progress" if i == done else "pending",
            )
            for i, text in enumerate(TODOS)
        )
    )


class Clock:
    """CPU and wall time of the streaming parts of a turn (not the approval wait)."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self.wall = 0.0
        self.tokens = 0
        self.finished = False
        self._since: tuple[float, float] | None = None

    def start(self) -> None:
        self._since = (time.process_time(), time.monotonic())

    def stop(self) -> None:
        assert self._since is not None
        cpu, wall = self._since
        self.cpu += time.process_time() - cpu
        self.wall += time.monotonic() - wall
        self._since = None


def paced_script(rate: float, seconds: float, clock: Clock) -> object:
    """A turn streaming ``rate`` tokens/s for ``seconds``: 20% thinking, an approved
    command, then the answer."""
    total = int(rate * seconds)
    thinking_tokens = total // 5
    text = answer_text(total)
    thinking = ("Let me look at how the scheduler admits requests. " * 200)[: thinking_tokens * 4]

    async def stream(pieces: list[str], first: int, reasoning: bool) -> AsyncIterator[ev.Event]:
        clock.start()
        start = last_usage = time.monotonic()
        for offset, piece in enumerate(pieces):
            index = first + offset
            delay = start + offset / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if reasoning:
                yield ev.ReasoningDelta(text=piece, tokens_so_far=index + 1, budget=1536)
            else:
                yield ev.ContentDelta(text=piece)
            now = time.monotonic()
            if now - last_usage >= 0.1:
                last_usage = now
                yield ev.UsageUpdate(
                    prompt_tokens=800,
                    completion_tokens=index + 1,
                    reasoning_tokens=min(index + 1, thinking_tokens),
                    ttft_s=0.3,
                    decode_tok_s=rate,
                    prefill_tok_s=2600.0,
                    context_used=801 + index,
                    context_limit=8192,
                )
        clock.stop()
        clock.tokens += len(pieces)

    async def run(agent: ScriptedAgent, prompt: str) -> AsyncIterator[ev.Event]:
        yield ev.TurnStarted(turn=1, user_text=prompt)
        yield ev.TodoUpdated(items=todo_list(0).items)
        yield ev.RequestStarted(
            request=1, reasoning_effort="low", thinking_token_budget=1536, messages=2
        )
        async for event in stream(chunks(thinking, 4), 0, True):
            yield event
        command = "python -m pytest -q tests/test_scheduler.py"
        yield ev.ToolCallStarted(
            call_id="c1", name="run_shell", arguments={"command": command}, raw_arguments="{}"
        )
        future: asyncio.Future[ev.ApprovalDecision] = asyncio.get_running_loop().create_future()
        yield ev.ApprovalRequested(
            call_id="c1",
            tool="run_shell",
            kind="shell",
            summary=command,
            detail=command,
            future=future,
        )
        approved = (await future).approved
        yield ev.ApprovalResolved(call_id="c1", tool="run_shell", approved=approved, by="user")
        yield ev.ToolCallFinished(call_id="c1", name="run_shell", result="12 passed in 0.4s")
        yield todo_list(2)
        yield ev.RequestStarted(
            request=2, reasoning_effort="low", thinking_token_budget=1536, messages=4
        )
        async for event in stream(chunks(text, 4), thinking_tokens, False):
            yield event
        yield ev.TurnFinished(
            reason="stop",
            content=text,
            requests=2,
            prompt_tokens=800,
            completion_tokens=clock.tokens,
        )
        clock.finished = True

    return run


@contextmanager
def legacy_drawing() -> Iterator[None]:
    """The drawing path from before: Textual's own ``_size_updated`` on the streamed
    answer and the conversation, so each flush that grows the answer lays the
    screen out a second (and third) time."""
    patched = [(cls, cls.__dict__["_size_updated"]) for cls in (MarkdownLines, Conversation)]
    for cls, _ in patched:
        delattr(cls, "_size_updated")
    try:
        yield
    finally:
        for cls, method in patched:
            setattr(cls, "_size_updated", method)  # noqa: B010


@dataclass(frozen=True)
class Result:
    share: float
    """CPU seconds of the process per wall second while streaming."""
    idle: float
    """The same, for the idle app before the turn."""
    rate: float
    """Tokens per second achieved."""
    load: float
    """One-minute load average when the run ended."""


async def measure(rate: float, seconds: float, *, draw: bool = True) -> Result:
    """One run. With ``draw=False`` the events still flow through the app's turn
    worker but nothing is rendered: the cost of the scripted stream itself."""
    clock = Clock()
    agent = ScriptedAgent([paced_script(rate, seconds, clock)])  # type: ignore[list-item]
    engine = ScriptedEngine(current=EngineStatus(state="ready", model="bench"))

    async def factory(request: SessionRequest) -> AgentPort:
        return agent

    settings = TuiSettings(workspace=Path.cwd(), paths=Paths.from_env(), model="bench")
    app = SparkcodeApp(settings, engine, factory)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(1.0)
        if not draw:

            async def ignore(event: ev.Event) -> None:
                if isinstance(event, ev.ApprovalRequested):
                    event.respond(True)

            app.main.renderer.handle = ignore  # type: ignore[method-assign]
        idle_cpu, idle_wall = time.process_time(), time.monotonic()
        await asyncio.sleep(min(seconds, 5.0))
        idle = (time.process_time() - idle_cpu) / (time.monotonic() - idle_wall)
        app.main.prompt.value = "how does the scheduler admit requests?"
        await pilot.press("enter")
        while not clock.finished or app.main.turn_running:
            card = app.main.approvals.pending()
            if card is not None:
                await asyncio.sleep(0.3)  # the card is drawn and read
                card.action_approve()
            await asyncio.sleep(0.05)
    return Result(clock.cpu / clock.wall, idle, clock.tokens / clock.wall, os.getloadavg()[0])


def _pct(results: list[Result]) -> str:
    return ", ".join(f"{r.share * 100:.1f}% (load {r.load:.1f})" for r in results)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=100.0, help="tokens per second")
    parser.add_argument("--seconds", type=float, default=15.0, help="length of the stream")
    parser.add_argument("--runs", type=int, default=3, help="repetitions (median reported)")
    parser.add_argument(
        "--compare", action="store_true", help="also run the drawing path from before, interleaved"
    )
    args = parser.parse_args()
    today: list[Result] = []
    before: list[Result] = []
    for _ in range(args.runs):
        today.append(asyncio.run(measure(args.rate, args.seconds)))
        if args.compare:
            with legacy_drawing():
                before.append(asyncio.run(measure(args.rate, args.seconds)))
    floor = asyncio.run(measure(args.rate, args.seconds, draw=False))
    share = statistics.median(r.share for r in today)
    print(
        f"stream: {statistics.median(r.rate for r in today):.1f} tok/s for "
        f"{args.seconds:.0f} s through the real widgets (headless, 120x40; todo panel, "
        f"an approval card, a tool card), {args.runs} runs on {os.cpu_count()} CPUs"
    )
    print(f"runs: {_pct(today)}")
    print(
        f"idle app over the same clock: "
        f"{statistics.median(r.idle for r in today) * 100:.1f}% of one core"
    )
    print(
        f"the scripted stream alone (events consumed, nothing drawn): "
        f"{floor.share * 100:.1f}% (load {floor.load:.1f}); drawing adds "
        f"{(share - floor.share) * 100:.1f}%"
    )
    if before:
        old = statistics.median(r.share for r in before)
        print(f"before (extra layout passes per growing flush), runs: {_pct(before)}")
        print(
            f"side by side (median, % of one core): before {old * 100:.1f}%, "
            f"today {share * 100:.1f}%, today / before {share / old:.2f}"
        )
    print(
        f"TUI CPU while streaming (median): {share * 100:.1f}% of one core "
        f"(target <= {TARGET * 100:.0f}%), ratio to target {share / TARGET:.2f}"
    )
    passed = share <= TARGET
    print(
        f"{'PASS' if passed else 'FAIL'}: median {share * 100:.1f}% "
        f"{'<=' if passed else '>'} {TARGET * 100:.0f}% of one core"
    )
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
