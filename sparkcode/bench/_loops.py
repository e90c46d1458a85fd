"""The loop probe: long code generations scored by the streaming detector.

Each sample is one chat request through the agent's client, recorded by the
session recorder exactly like an agent turn; the streaming detector reads the
deltas as they arrive. A degenerate sample keeps its session (``sparkcode
replay ID`` opens it); clean ones are deleted unless ``--keep-all``.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from engine.errors import UserError
from engine.paths import Paths
from sparkcode.agent.wire.client import ChatClient, ChatError
from sparkcode.detect import DegenerationDetector, Verdict
from sparkcode.sessions import start_recording

from ._run import Context

TASKS = (
    "a complete Python implementation of a B-tree with insert, delete and range queries",
    "a full tokenizer, parser and evaluator for arithmetic expressions with variables in Python",
    "a Python module for a thread pool with futures, cancellation and timeouts",
    "a complete JSON parser in Python without using the json module, with error positions",
    "an LRU and an LFU cache in Python with the same interface and thorough unit tests",
    "a Python command-line todo application storing tasks in SQLite, with argparse subcommands",
    "a Python implementation of Dijkstra, A* and Bellman-Ford on a weighted graph class",
    "a Markdown-to-HTML converter in Python handling headings, lists, code blocks and links",
    "a Python asyncio chat server and client with rooms, nicknames and a message history",
    "a complete Python regular expression engine supporting *, +, ?, | and groups",
    "a Python matrix class with addition, multiplication, determinant, inverse and tests",
    "a Python rate limiter library: token bucket, leaky bucket and sliding window, with tests",
    "a Python text adventure game engine with rooms, items, a parser and save files",
    "a Python library for interval trees with insertion, deletion and overlap queries",
    "a Python HTTP/1.1 request parser and response builder with chunked encoding",
    "a Python implementation of the Raft leader election and log replication, simulated",
)

PROMPT = (
    "Write {task}. Write the whole program in one Python file, fully implemented "
    "(no placeholders), with docstrings and comments."
)


def prompts(n: int) -> list[str]:
    return [PROMPT.format(task=TASKS[i % len(TASKS)]) for i in range(n)]


async def _sample(
    ctx: Context, paths: Paths, index: int, prompt: str, dropped: set[str]
) -> dict[str, Any]:
    s = ctx.settings
    target = ctx.target
    recorder, transport = start_recording(
        target.base_url,
        workspace=Path.cwd(),
        model=target.model,
        paths=paths,
        api_key_env=target.api_key_env,
        origin="bench-loops",
    )
    client = ChatClient(target.base_url, target.model, target.api_key_env, transport=transport)
    # Fields an earlier sample's server refused are not sent (and refused) again.
    client.dropped = set(dropped)
    detector = DegenerationDetector()
    fired: Verdict | None = None
    params: dict[str, Any] = {
        "max_tokens": s["max_tokens"],
        "temperature": s["temperature"],
        "seed": s["seed"] + index,
        "reasoning_effort": s["reasoning_effort"],
    }
    budget = s["thinking_token_budget"]
    if budget is None:
        budget = target.agent.thinking_token_budget
    if budget >= 0:
        params["thinking_token_budget"] = budget
    began = time.monotonic()
    try:
        async with client.stream_chat(
            [{"role": "user", "content": prompt}], params=params
        ) as stream:
            async for delta in stream:
                verdict = detector.feed(delta.reasoning + delta.content)
                if verdict is not None:
                    fired = verdict
                    if s["stop_on_detect"]:
                        break
        if fired is None:
            final = detector.finish()
            fired = final if final.degenerate else None
    except ChatError as exc:
        raise UserError(f"{ctx.label}: loops sample {index}: {exc}") from None
    finally:
        dropped |= client.dropped
        await client.aclose()
        recorder.close()
    result = stream.result()
    session: str | None = None
    if fired is not None or s["keep_all"]:
        session = recorder.session_id
    else:
        with contextlib.suppress(FileNotFoundError):
            recorder.path.unlink()
    return {
        "prompt": prompt,
        "degenerate": fired is not None,
        "pattern": fired.pattern if fired else None,
        "detail": fired.detail if fired else None,
        "position": fired.position if fired else None,
        "chars": detector.chars_seen,
        "completion_tokens": result.stats.completion_tokens,
        "finish_reason": result.finish_reason,
        "stopped_early": result.cut,
        "decode_tok_s": result.stats.decode_tok_s,
        "wall_s": round(time.monotonic() - began, 3),
        "session": session,
    }


async def run(ctx: Context) -> None:
    paths = ctx.paths
    items = prompts(int(ctx.settings["n"]))
    keys = [str(i) for i in range(len(items))]
    bar = ctx.bar("loops", keys)
    dropped: set[str] = set()
    for key, prompt in zip(keys, items, strict=True):
        if ctx.result.done(ctx.label, key):
            continue
        unit = await _sample(ctx, paths, int(key), prompt, dropped)
        ctx.result.put(ctx.label, key, unit)
        bar.advance(
            f"{ctx.label}: loops {key} "
            + (f"degenerate ({unit['pattern']})" if unit["degenerate"] else "clean")
        )
