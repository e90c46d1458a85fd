"""Time-to-healthy: `sparkcode engine start` vs the rendered command by hand.

Boots the same tiny model both ways, alternating, several times, in one run,
and prints the ratio of median times (target: at most 1.05).

    .venv/bin/python -m bench.targets.engine_boot [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from engine.paths import Paths
from engine.profiles import load_profile, render
from tests.support.engine import engine_lock, free_port
from tests.support.tiny_models import build_tiny_llama, write_profile


def wait_healthy(url: str, proc: subprocess.Popen[bytes] | None, limit: float = 900) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=0.5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"engine exited with {proc.returncode}")
        time.sleep(0.1)
    raise RuntimeError("engine never became healthy")


def by_hand(home: Path, port: int) -> float:
    os.environ["SPARKCODE_HOME"] = str(home)
    paths = Paths.from_env()
    spec = render(load_profile("tiny", paths), paths, port=port)
    began = time.monotonic()
    proc = subprocess.Popen(
        spec.argv,
        env={**os.environ, **spec.env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_healthy(f"http://127.0.0.1:{port}/health", proc)
        return time.monotonic() - began
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def via_sparkcode(home: Path, port: int) -> float:
    env = {**os.environ, "SPARKCODE_HOME": str(home)}
    cli = [sys.executable, "-m", "sparkcode", "engine"]
    began = time.monotonic()
    subprocess.run(
        [*cli, "start", "--profile", "tiny", "--port", str(port)],
        env=env,
        check=True,
        capture_output=True,
    )
    took = time.monotonic() - began
    subprocess.run([*cli, "stop"], env=env, check=True, capture_output=True)
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    # The machine-wide engine lock keeps test engines from booting alongside.
    with tempfile.TemporaryDirectory() as tmp, engine_lock():
        home = Path(tmp) / "home"
        model = build_tiny_llama(Path(tmp) / "tiny")
        write_profile(home / "config", "tiny", model, 8400)
        hand: list[float] = []
        ours: list[float] = []
        for i in range(args.rounds):
            # Alternate the order so warm caches favour neither side.
            order = (by_hand, via_sparkcode) if i % 2 == 0 else (via_sparkcode, by_hand)
            for fn in order:
                took = fn(home, free_port())
                (hand if fn is by_hand else ours).append(took)
                print(f"round {i + 1}: {fn.__name__:<14} {took:6.2f} s", flush=True)
    h, o = statistics.median(hand), statistics.median(ours)
    print(f"\nmedian time to healthy: by hand {h:.2f} s, sparkcode engine start {o:.2f} s")
    print(f"ratio sparkcode/by-hand: {o / h:.3f} (target <= 1.05)")


if __name__ == "__main__":
    main()
