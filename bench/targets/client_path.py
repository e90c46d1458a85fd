"""Client-path benchmark: sparkcode's ChatClient vs bare httpx line iteration.

Synthesises a vLLM-style chat-completions SSE stream of at least 100k tokens
(reasoning, then answer text, then tool calls; 1-4 tokens per frame as with
speculative decoding; continuous usage on every frame) and serves the same
bytes through httpx.MockTransport to both:

- bare: ``async for line in response.aiter_lines()`` (no parsing at all);
- sparkcode: ``ChatClient.stream_chat`` - SSE parsing, frame decoding, usage
  accounting, tool-call assembly.

Prints both throughputs and the ratio bare_time / client_time (target >= 0.5),
for wall time and for this process's CPU time (steadier on a shared machine);
each is the best of --repeat interleaved runs.
Usage: python -m bench.targets.client_path [--tokens N] [--repeat R]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from collections.abc import AsyncIterator

import httpx

from sparkcode.agent.wire.client import ChatClient

WORDS = (
    "the model ",
    "writes ",
    "some ",
    "code ",
    "def ",
    "return ",
    "x",
    " = ",
    "1\n",
    "    ",
    "import ",
    "for ",
    "i ",
    "in ",
    "range(",
    ")",
    ":",
    "self.",
    "é",
    "→ ",
)


def synthesise(tokens: int, seed: int = 0) -> tuple[bytes, int, int]:
    """The SSE bytes, the number of frames and the exact completion tokens."""
    rng = random.Random(seed)
    frames: list[bytes] = []
    made = 0
    prompt = 1800
    base = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "glm-5.3-flash",
    }

    def emit(delta: dict[str, object], n: int, finish: str | None = None) -> None:
        # Field for field what vLLM 0.32 streams with continuous_usage_stats.
        nonlocal made
        made += n
        body = {
            **base,
            "choices": [
                {
                    "index": 0,
                    "delta": delta,
                    "logprobs": None,
                    "finish_reason": finish,
                    "token_ids": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "total_tokens": prompt + made,
                "completion_tokens": made,
                "completion_tokens_details": None,
            },
        }
        frames.append(b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n")

    emit({"role": "assistant", "content": ""}, 0)
    phase_reason = tokens * 3 // 10
    phase_content = tokens * 8 // 10
    call = 0
    while made < tokens:
        n = rng.choice((1, 1, 2, 3, 4))
        text = "".join(rng.choice(WORDS) for _ in range(n))
        if made < phase_reason:
            emit({"reasoning": text}, n)
        elif made < phase_content:
            emit({"content": text}, n)
        else:
            if rng.random() < 0.02 or call == 0:
                emit(
                    {
                        "tool_calls": [
                            {
                                "index": call,
                                "id": f"call_{call}",
                                "type": "function",
                                "function": {"name": "write_file", "arguments": '{"'},
                            }
                        ]
                    },
                    n,
                )
                call += 1
            else:
                emit(
                    {
                        "tool_calls": [
                            {"index": call - 1, "function": {"arguments": json.dumps(text)[1:-1]}}
                        ]
                    },
                    n,
                )
    emit({}, 0, finish="tool_calls")
    frames.append(b"data: [DONE]\n\n")
    return b"".join(frames), len(frames), made


def transport(payload: bytes, piece: int = 4096) -> httpx.MockTransport:
    async def body() -> AsyncIterator[bytes]:
        for i in range(0, len(payload), piece):
            yield payload[i : i + piece]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body())

    return httpx.MockTransport(handler)


Timing = tuple[float, float]
"""(wall seconds, CPU seconds of this process)."""


async def bare(payload: bytes) -> Timing:
    async with httpx.AsyncClient(transport=transport(payload)) as http:
        wall, cpu = time.perf_counter(), time.process_time()
        async with http.stream(
            "POST", "http://bench.test/v1/chat/completions", json={"stream": True}
        ) as response:
            lines = 0
            async for _line in response.aiter_lines():
                lines += 1
        return time.perf_counter() - wall, time.process_time() - cpu


async def client_path(payload: bytes, expect_tokens: int) -> Timing:
    client = ChatClient("http://bench.test/v1", "glm-5.3-flash", transport=transport(payload))
    wall, cpu = time.perf_counter(), time.process_time()
    async with client.stream_chat([{"role": "user", "content": "go"}]) as stream:
        async for _delta in stream:
            pass
    result = stream.result()
    elapsed = time.perf_counter() - wall, time.process_time() - cpu
    await client.aclose()
    if result.stats.completion_tokens != expect_tokens or not result.tool_calls:
        raise SystemExit(
            f"client path miscounted: {result.stats.completion_tokens} tokens, "
            f"expected {expect_tokens}"
        )
    for call in result.tool_calls:
        if not call.arguments.startswith('{"'):
            raise SystemExit("tool call arguments were not assembled")
    return elapsed


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=120_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    payload, frames, tokens = synthesise(args.tokens)
    print(f"stream: {tokens} tokens in {frames} frames, {len(payload) / 1e6:.1f} MB")
    bare_runs: list[Timing] = []
    client_runs: list[Timing] = []
    for _ in range(args.repeat):  # interleaved so load drift hits both alike
        bare_runs.append(await bare(payload))
        client_runs.append(await client_path(payload, tokens))
    for i, what in ((0, "wall"), (1, "CPU")):
        b = min(r[i] for r in bare_runs)
        c = min(r[i] for r in client_runs)
        print(
            f"{what:>4}: bare httpx aiter_lines {b * 1e3:7.1f} ms "
            f"({tokens / b / 1e6:.2f} M tok/s)"
            f" | sparkcode ChatClient {c * 1e3:7.1f} ms ({tokens / c / 1e6:.2f} M tok/s)"
            f" | ratio bare/client {b / c:.2f} (target >= 0.5)"
        )


if __name__ == "__main__":
    asyncio.run(main())
