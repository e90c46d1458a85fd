"""CPU the TUI spends rendering a 100 tok/s stream (target: at most 20% of one core).

A scripted agent streams thinking and a markdown answer (prose, lists, code
blocks) at a fixed token rate, with usage updates every 0.1 s the way the real
agent sends them, through the real app and widgets in a headless run. The
figure is the process CPU time over the wall time of the stream; the idle app
over the same time is printed beside it for reference.

    .venv/bin/python bench/tui_cpu.py [--rate 100] [--seconds 15]

It ends with PASS or FAIL against the target (exit status 0 or 1).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import AsyncIterator
from pathlib import Path

from engine.supervisor import EngineStatus
from sparkcode.agent import events as ev
from sparkcode.tui import SparkcodeApp, TuiSettings
from sparkcode.tui.agent_port import AgentPort, SessionRequest
from sparkcode.tui.scripted import ScriptedAgent, ScriptedEngine

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


def paced_script(rate: float, seconds: float, marks: dict[str, float]) -> object:
    """A turn streaming ``rate`` tokens/s for ``seconds`` (20% thinking, then answer)."""
    total = int(rate * seconds)
    thinking_tokens = total // 5
    text = answer_text(total)
    thinking = ("Let me look at how the scheduler admits requests. " * 200)[: thinking_tokens * 4]

    async def run(agent: ScriptedAgent, prompt: str) -> AsyncIterator[ev.Event]:
        yield ev.TurnStarted(turn=1, user_text=prompt)
        yield ev.RequestStarted(request=1, reasoning_effort="low", thinking_token_budget=1536,
                                messages=2)
        start = time.monotonic()
        marks["start_wall"] = start
        marks["start_cpu"] = time.process_time()
        last_usage = start
        pieces = [thinking[i:i + 4] for i in range(0, len(thinking), 4)]
        pieces += [text[i:i + 4] for i in range(0, len(text), 4)]
        for index, piece in enumerate(pieces):
            due = start + index / rate
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if index < thinking_tokens:
                yield ev.ReasoningDelta(text=piece, tokens_so_far=index + 1, budget=1536)
            else:
                yield ev.ContentDelta(text=piece)
            now = time.monotonic()
            if now - last_usage >= 0.1:
                last_usage = now
                elapsed = now - start
                yield ev.UsageUpdate(
                    prompt_tokens=800, completion_tokens=index + 1,
                    reasoning_tokens=min(index + 1, thinking_tokens), ttft_s=0.3,
                    decode_tok_s=index / elapsed if elapsed else None, prefill_tok_s=2600.0,
                    context_used=801 + index, context_limit=8192,
                )
        marks["end_wall"] = time.monotonic()
        marks["end_cpu"] = time.process_time()
        marks["tokens"] = len(pieces)
        yield ev.TurnFinished(reason="stop", content=text, requests=1, prompt_tokens=800,
                              completion_tokens=len(pieces))

    return run


async def measure(rate: float, seconds: float, *,
                  draw: bool = True) -> tuple[float, float, float]:
    """(stream CPU share, idle CPU share, achieved tok/s).

    With ``draw=False`` the events still flow through the app's turn worker
    but nothing is rendered: the cost of the scripted stream itself.
    """
    marks: dict[str, float] = {}
    agent = ScriptedAgent([paced_script(rate, seconds, marks)])  # type: ignore[list-item]
    engine = ScriptedEngine(current=EngineStatus(state="ready", model="bench"))

    async def factory(request: SessionRequest) -> AgentPort:
        return agent

    settings = TuiSettings(workspace=Path.cwd(), model="bench")
    app = SparkcodeApp(settings, engine, factory)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(1.0)
        if not draw:
            async def ignore(event: ev.Event) -> None:
                return None

            app.main.renderer.handle = ignore  # type: ignore[method-assign]
        idle_cpu, idle_wall = time.process_time(), time.monotonic()
        await asyncio.sleep(min(seconds, 5.0))
        idle = (time.process_time() - idle_cpu) / (time.monotonic() - idle_wall)
        app.main.prompt.value = "how does the scheduler admit requests?"
        await pilot.press("enter")
        while app.main.turn_running or "end_wall" not in marks:
            await asyncio.sleep(0.1)
    wall = marks["end_wall"] - marks["start_wall"]
    cpu = marks["end_cpu"] - marks["start_cpu"]
    return cpu / wall, idle, marks["tokens"] / wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=100.0, help="tokens per second")
    parser.add_argument("--seconds", type=float, default=15.0, help="length of the stream")
    parser.add_argument("--runs", type=int, default=3, help="repetitions (median reported)")
    args = parser.parse_args()
    results = [asyncio.run(measure(args.rate, args.seconds)) for _ in range(args.runs)]
    shares = sorted(r[0] for r in results)
    share = statistics.median(shares)
    idle = statistics.median(r[1] for r in results)
    achieved = statistics.median(r[2] for r in results)
    floor = asyncio.run(measure(args.rate, args.seconds, draw=False))[0]
    load = os.getloadavg()[0]
    print(f"stream: {achieved:.1f} tok/s for {args.seconds:.0f} s through the real widgets "
          f"(headless, 120x40), {args.runs} runs, load average {load:.1f} on "
          f"{os.cpu_count()} CPUs")
    print("runs: " + ", ".join(f"{s * 100:.1f}%" for s in shares))
    print(f"TUI CPU while streaming (median): {share * 100:.1f}% of one core "
          f"(target <= {TARGET * 100:.0f}%)")
    print(f"idle app over the same clock: {idle * 100:.1f}% of one core")
    print(f"the scripted stream alone (events consumed, nothing drawn): {floor * 100:.1f}%; "
          f"drawing adds {(share - floor) * 100:.1f}%")
    print(f"ratio streaming / target: {share / TARGET:.2f}")
    passed = share <= TARGET
    print(f"{'PASS' if passed else 'FAIL'}: median {share * 100:.1f}% "
          f"{'<=' if passed else '>'} {TARGET * 100:.0f}% of one core")
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
