"""Recording overhead on the agent's client path, recorded vs unrecorded, one run.

The same vLLM-style SSE stream (one token per frame, usage on every frame, as
vLLM streams it to the agent) is read by the agent's ``ChatClient`` twice per
round: once through the plain transport and once through
``RecordingTransport``, which writes every chunk to a session file (one
a copy into a shared map of the file per chunk, fsync at the end) exactly as in a live session.

Three client paths are measured:

- ``live``: a real loopback HTTP connection from a server in a child process
  that sends one frame per write with a short pause between frames, so every
  frame arrives on its own as from a decoding engine - the path a live session
  takes. The target applies here, to the client process's CPU time (the
  pauses make wall time meaningless as a cost);
- ``burst``: the same server without pauses (frames coalesce into larger reads);
- ``memory``: served from memory by ``httpx.MockTransport``: the client's own
  work is as small as it gets, so recording's share is the largest it can be
  (a worst case, shown for reference).

Each round reads the stream unrecorded and recorded back to back, in
alternating order. The ratio printed is the median of the per-round (paired)
recorded / unrecorded ratios, with the best-of-rounds ratio beside it. On the
live path the client's CPU per token varies by tens of percent from read to
read on a shared machine, so a second estimate is printed: the recording's own
work per token, measured on the memory path, over the live client's CPU per
token.
Usage: python -m bench.targets.recording_overhead [--tokens N] [--rounds R] [--pace-us US]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from sparkcode.agent.wire.client import ChatClient
from sparkcode.sessions import RecordingTransport, SessionRecorder, load_session

WORDS = (
    "def",
    " return",
    " self",
    ".",
    "value",
    " =",
    " (",
    ")",
    "\n",
    "    ",
    " the",
    " model",
    " answer",
    ",",
    " if",
    " for",
    " in",
    " range",
    ":",
    "é",
)


def build_stream(tokens: int) -> list[bytes]:
    frames: list[bytes] = []
    for n in range(tokens):
        body = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "bench",
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": WORDS[n % len(WORDS)]},
                    "logprobs": None,
                    "finish_reason": None,
                }
            ],
            "usage": {"prompt_tokens": 900, "completion_tokens": n + 1, "total_tokens": 901 + n},
        }
        frames.append(b"data: " + json.dumps(body).encode() + b"\n\n")
    final = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "bench",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 900, "completion_tokens": tokens, "total_tokens": 900 + tokens},
    }
    frames.append(b"data: " + json.dumps(final).encode() + b"\n\n")
    frames.append(b"data: [DONE]\n\n")
    return frames


def serve(port_queue: multiprocessing.Queue[int], tokens: int, pace_s: float) -> None:
    """A minimal HTTP/1.1 server streaming the frames, one write (and chunk) each."""
    frames = build_stream(tokens)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\n\r\n"
                )
                for frame in frames:
                    writer.write(b"%x\r\n%s\r\n" % (len(frame), frame))
                    await writer.drain()
                    if pace_s:
                        await asyncio.sleep(pace_s)
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        server = await asyncio.start_server(handle, sock=sock)
        port_queue.put(sock.getsockname()[1])
        async with server:
            await server.serve_forever()

    asyncio.run(main())


async def read_once(client: ChatClient) -> int:
    async with client.stream_chat([{"role": "user", "content": "bench"}]) as stream:
        async for _ in stream:
            pass
    return stream.stats.completion_tokens


async def measure(
    make_inner: type[httpx.AsyncBaseTransport] | object,
    base_url: str,
    tokens: int,
    rounds: int,
    directory: Path,
) -> dict[str, list[float]]:
    """Interleaved unrecorded/recorded reads; wall and CPU seconds of each.

    The recorded reads are the exchanges of one session, as the turns of a real
    session are: the file is created once, and each exchange ends with an fsync.
    """
    times: dict[str, list[float]] = {
        "plain": [],
        "recorded": [],
        "plain_cpu": [],
        "recorded_cpu": [],
    }
    recorder = SessionRecorder(directory, workspace=directory, engine={})
    for round_ in range(rounds + 1):
        # Alternate which goes first: the second read of a pair can be systematically
        # cheaper or dearer (caches, the server's pacing), which must not count.
        for mode in ("plain", "recorded") if round_ % 2 else ("recorded", "plain"):
            inner = make_inner() if callable(make_inner) else make_inner
            assert isinstance(inner, httpx.AsyncBaseTransport)
            transport: httpx.AsyncBaseTransport = inner
            if mode == "recorded":
                transport = RecordingTransport(inner, recorder)
            client = ChatClient(base_url, "bench", transport=transport)
            wall, cpu = time.perf_counter(), time.process_time()
            got = await read_once(client)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            await client.aclose()
            assert got == tokens, got
            if round_ > 0:  # round 0 warms up both paths
                times[mode].append(wall)
                times[f"{mode}_cpu"].append(cpu)
    recorder.close()
    session = load_session(recorder.path)
    assert len(session.exchanges) == rounds + 1 and not session.problems
    assert all(len(x.chunks) >= tokens // 2 for x in session.exchanges)
    recorder.path.unlink()
    return times


def report(name: str, times: dict[str, list[float]], tokens: int) -> dict[str, float]:
    """Prints, per clock, the median of the paired per-round ratios (the headline:
    robust to a lucky or unlucky read on either side) and the best-of-rounds ratio."""
    ratios: dict[str, float] = {}
    for kind, label in (("_cpu", "cpu "), ("", "wall")):
        plain, recorded = times[f"plain{kind}"], times[f"recorded{kind}"]
        paired = statistics.median(r / p for p, r in zip(plain, recorded, strict=True))
        best = min(recorded) / min(plain)
        ratios[label.strip()] = paired
        ratios[f"{label.strip()}_plain_us"] = statistics.median(plain) / tokens * 1e6
        ratios[f"{label.strip()}_recorded_us"] = statistics.median(recorded) / tokens * 1e6
        print(
            f"  {name:<6} {label}: unrecorded {statistics.median(plain) / tokens * 1e6:6.2f} "
            f"us/token, recorded {statistics.median(recorded) / tokens * 1e6:6.2f} us/token "
            f"(medians), paired ratio {paired:.3f} ({(paired - 1) * 100:+.1f}%), "
            f"best-of-rounds {best:.3f}"
        )
    return ratios


def run_http(tokens: int, rounds: int, pace_s: float, directory: Path) -> dict[str, list[float]]:
    ports: multiprocessing.Queue[int] = multiprocessing.Queue()
    server = multiprocessing.Process(target=serve, args=(ports, tokens, pace_s), daemon=True)
    server.start()
    try:
        port = ports.get(timeout=30)
        return asyncio.run(
            measure(
                httpx.AsyncHTTPTransport, f"http://127.0.0.1:{port}/v1", tokens, rounds, directory
            )
        )
    finally:
        server.terminate()
        server.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument(
        "--pace-us",
        type=float,
        default=300.0,
        help="pause between frames on the live path (microseconds)",
    )
    args = parser.parse_args()
    frames = build_stream(args.tokens)

    def memory_transport() -> httpx.AsyncBaseTransport:
        async def handler(request: httpx.Request) -> httpx.Response:
            async def body() -> AsyncIterator[bytes]:
                for frame in frames:
                    yield frame

            return httpx.Response(
                200, headers={"content-type": "text/event-stream"}, content=body()
            )

        return httpx.MockTransport(handler)

    print(
        f"recording overhead: {args.tokens} tokens per stream, one frame per write, "
        f"{args.rounds} paired rounds (pid {os.getpid()})"
    )
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        live = run_http(args.tokens, args.rounds, args.pace_us / 1e6, directory)
        burst = run_http(args.tokens, args.rounds, 0.0, directory)
        memory = asyncio.run(
            measure(
                memory_transport, "http://bench.invalid/v1", args.tokens, args.rounds, directory
            )
        )
    live_r = report("live", live, args.tokens)
    report("burst", burst, args.tokens)
    mem_r = report("memory", memory, args.tokens)
    ratio = live_r["cpu"]
    # The recording's own work per token, isolated on the memory path (nothing else
    # varies there), against what the client spends per token on a live connection:
    # a second estimate of the live overhead that the live path's noise cannot blur.
    work = mem_r["cpu_recorded_us"] - mem_r["cpu_plain_us"]
    print(
        f"recording work per token (memory path): {work:.2f} us = "
        f"{work / live_r['cpu_plain_us'] * 100:.1f}% of the live client's CPU per token"
    )
    verdict = "PASS" if ratio <= 1.10 else "FAIL"
    print(
        f"recorded/unrecorded client CPU on the live path (paired median): {ratio:.3f} "
        f"(target <= 1.10): {verdict}"
    )


if __name__ == "__main__":
    main()
