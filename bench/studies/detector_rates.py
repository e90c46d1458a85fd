"""False-positive and detection rates of the degeneration detector.

Runs :func:`sparkcode.detect.detect_text` over the corpus of
``bench/corpora/detector_corpus.py`` and prints, in one run: the false-positive rate on
normal samples (target at most 1%), the detection rate on degenerate samples
(target at least 95%), both per kind, which patterns fired, and throughput in
characters per second for whole texts and for a stream of 4-character deltas.

Usage::

    python -m bench.studies.detector_rates [CORPUS_DIR] [--seed 7] [--normal 2000]
        [--degenerate 1100] [--show 5] [--json]

Without CORPUS_DIR the corpus is built in memory from the seed.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench.corpora.detector_corpus import Sample, build, load
from bench.corpora.detector_scoring import DETECTION_TARGET, FP_TARGET, Rates, evaluate
from sparkcode.detect import DegenerationDetector


def streamed_throughput(samples: list[Sample], delta: int = 4, limit: int = 300_000) -> float:
    """Characters per second when fed ``delta`` characters at a time (a token stream)."""
    chars = 0
    seconds = 0.0
    for sample in samples:
        if chars >= limit:
            break
        text = sample.text
        detector = DegenerationDetector()
        start = time.perf_counter()
        for i in range(0, len(text), delta):
            detector.feed(text[i : i + delta])
        detector.finish()
        seconds += time.perf_counter() - start
        chars += len(text)
    return chars / seconds if seconds else 0.0


def report(rates: Rates, streamed: float, show: int) -> str:
    lines = [
        f"normal samples:      {rates.normal}",
        f"false positives:     {rates.false_positives}  rate {100 * rates.fp_rate:.2f}%  "
        f"(target <= {100 * FP_TARGET:.0f}%: {'PASS' if rates.fp_rate <= FP_TARGET else 'FAIL'})",
        f"degenerate samples:  {rates.degenerate}",
        f"detected:            {rates.detected}  rate {100 * rates.detection_rate:.2f}%  "
        f"(target >= {100 * DETECTION_TARGET:.0f}%: "
        f"{'PASS' if rates.detection_rate >= DETECTION_TARGET else 'FAIL'})",
        "",
        "per kind (flagged / samples):",
    ]
    for kind in sorted(rates.by_kind):
        hit, total = rates.by_kind[kind]
        lines.append(f"  {kind:<26} {hit:>5} / {total:<5} {100 * hit / total:6.2f}%")
    for label in ("degenerate", "normal"):
        counts = rates.patterns.get(label)
        if counts:
            lines.append(f"patterns that fired on {label} samples:")
            lines.extend(f"  {p:<18} {n}" for p, n in counts.most_common())
    lines += [
        "",
        f"throughput, whole texts:      {rates.chars / rates.seconds:,.0f} chars/s "
        f"({rates.chars:,} chars in {rates.seconds:.1f} s)",
        f"throughput, 4-char deltas:    {streamed:,.0f} chars/s",
    ]
    if show:
        for sample, verdict in rates.flagged_normal[:show]:
            lines.append(
                f"FALSE POSITIVE {sample.name}: {verdict.pattern} at {verdict.position}: "
                f"{verdict.detail[:160]}"
            )
        for sample in rates.missed[:show]:
            lines.append(f"MISSED {sample.name}: {sample.detail}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Degeneration detector FP and detection rates")
    parser.add_argument("corpus", nargs="?", type=Path, help="corpus directory (default: build)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--normal", type=int, default=2000)
    parser.add_argument("--degenerate", type=int, default=1100)
    parser.add_argument("--show", type=int, default=5, help="false positives / misses to list")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    samples = load(args.corpus) if args.corpus else build(args.seed, args.normal, args.degenerate)
    rates = evaluate(samples)
    streamed = streamed_throughput(samples)
    if args.json:
        print(
            json.dumps(
                {
                    "fp_rate": rates.fp_rate,
                    "false_positives": rates.false_positives,
                    "normal": rates.normal,
                    "detection_rate": rates.detection_rate,
                    "detected": rates.detected,
                    "degenerate": rates.degenerate,
                    "by_kind": {
                        k: {"flagged": v[0], "samples": v[1]} for k, v in rates.by_kind.items()
                    },
                    "patterns": {k: dict(v) for k, v in rates.patterns.items()},
                    "chars_per_s": rates.chars / rates.seconds,
                    "streamed_chars_per_s": streamed,
                },
                indent=2,
            )
        )
    else:
        print(report(rates, streamed, args.show))
    ok = rates.fp_rate <= FP_TARGET and rates.detection_rate >= DETECTION_TARGET
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
