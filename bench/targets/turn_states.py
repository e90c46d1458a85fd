"""Kept turn states: what a follow-up turn re-prefills on a hybrid, feature off vs on.

Serves a small random Qwen3-Next hybrid (the tests' builder, hidden 1024, 2 x (3 GDN + 1
attention) layers) under two profiles that differ only in the ``turn_states`` feature, and
runs ``sparkcode bench throughput --turn-tokens 128`` over both in one invocation: per
history length (1k, 4k, 8k) the history is sent once, then it plus 128 new tokens is
timed. Prints the bench's own side-by-side table, then per length the re-prefilled
tokens and the TTFT ratio off/on, and PASS or FAIL against the target: with the
feature a turn re-prefills at most its 128 new tokens plus one 16-token match unit.

    .venv/bin/python -m bench.targets.turn_states [--repeats 3] [--out DIR]

Cores: an engine here takes every core it may run on (``bind_all_cores``); run it on
an otherwise idle machine and read the host load the table prints.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from engine.profiles import TURN_STATE_UNIT
from tests.support.engine import engine_lock, free_port
from tests.support.tiny_hybrid import build_tiny_qwen3_next
from tests.support.tiny_models import write_profile

TURN = 128
LENGTHS = (1024, 4096, 8192)
PROFILES = {
    "hybrid-off": '[plugin]\nenabled = true\nfeatures = ["scheduler_fix"]\n',
    "hybrid-on": '[plugin]\nenabled = true\nfeatures = ["scheduler_fix", "turn_states"]\n',
}
SERVER = 'extra_args = ["--enable-prompt-tokens-details"]'


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, engine_lock():
        home = Path(tmp) / "home"
        out = args.out or Path(tmp) / "bench"
        # Wider and deeper than the tests' hybrid (hidden 1024, 8 layers): prefill
        # compute, not the per-step overhead of a 128-wide model, decides TTFT.
        model = build_tiny_qwen3_next(
            Path(tmp) / "small-qwen3-next",
            max_position_embeddings=16384,
            varied_outputs=True,
            hidden_size=1024,
            blocks=2,
        )
        for name, plugin in PROFILES.items():
            write_profile(
                home / "config",
                name,
                model,
                free_port(),
                extra=plugin,
                server=SERVER,
                max_model_len=16384,
            )
        env = {**os.environ, "SPARKCODE_HOME": str(home)}
        cmd = [
            sys.executable,
            "-m",
            "sparkcode",
            "bench",
            "throughput",
            *[a for name in PROFILES for a in ("--profile", name)],
            "--prefill",
            ",".join(str(n) for n in LENGTHS),
            "--turn-tokens",
            str(TURN),
            "--kinds",
            "code",
            "--decode-tokens",
            "16",
            "-n",
            str(args.repeats),
            "--out",
            str(out),
        ]
        subprocess.run(cmd, env=env, check=True)
        results = json.loads((out / "results.json").read_text())
    report(results["units"])


def report(units: dict[str, dict[str, dict[str, object]]]) -> None:
    """Per length: re-prefilled tokens and TTFT, off against on, and the verdict."""
    print(f"\nre-prefilled tokens and TTFT of a {TURN}-token turn (median of runs):")
    ok = True
    for length in LENGTHS:
        row = {}
        for name in PROFILES:
            runs = [u for k, u in units[name].items() if k.startswith(f"turn:{length}:")]
            re = [int(str(u["prompt_tokens"])) - int(str(u["cached_tokens"])) for u in runs]
            ttft = statistics.median(
                float(str(u["ttft_s"])) for u in runs if u["ttft_s"] is not None
            )
            row[name] = (max(re), ttft)
        (off_re, off_t), (on_re, on_t) = row["hybrid-off"], row["hybrid-on"]
        passed = on_re <= TURN + TURN_STATE_UNIT
        ok = ok and passed
        print(
            f"  after {length:>5}: off {off_re:>5} tokens {off_t:.3f} s | on {on_re:>4} "
            f"tokens {on_t:.3f} s | TTFT off/on {off_t / on_t:.2f}x | "
            f"{'PASS' if passed else 'FAIL'} (on <= {TURN} + {TURN_STATE_UNIT})"
        )
    print("PASS" if ok else "FAIL")


if __name__ == "__main__":
    main()
