"""How edit_file copes with drifted copies: share applied correctly, wrong applications.

Runs the corpus of ``bench/corpora/edit_drift.py`` (stdlib blocks changed as a model would,
then copied with trailing spaces, tabs for spaces, re-indented, other line ends, or a wrong
character) through the real ``edit_file`` tool and prints per drift: correct, refused, wrong.
Usage: python -m bench.studies.edit_drift [--cases N] [--seed S]
"""

from __future__ import annotations

import argparse
import asyncio
from collections import Counter

from bench.corpora.edit_drift import DRIFTS, Outcome, build, evaluate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=900)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    cases = build(args.cases, args.seed)
    results = asyncio.run(evaluate(cases))
    kinds = Counter(c.drift for c in cases)
    print(f"edit_file on {len(cases)} drifted edits of stdlib code (seed {args.seed})")
    print(f"{'drift':<10} {'cases':>5} {'correct':>8} {'refused':>8} {'wrong':>6}")
    applicable = correct = wrong = 0
    for drift in DRIFTS:
        r = results.get(drift, Outcome())
        print(f"{drift:<10} {kinds[drift]:>5} {r.correct:>8} {r.refused:>8} {r.wrong:>6}")
        wrong += r.wrong
        if drift != "content":
            applicable += kinds[drift]
            correct += r.correct
    drifted = sum(kinds[d] for d in DRIFTS if d not in ("exact", "content"))
    drifted_ok = sum(
        results.get(d, Outcome()).correct for d in DRIFTS if d not in ("exact", "content")
    )
    print(
        f"applied correctly: {correct}/{applicable} = {correct / applicable:.1%} "
        f"(drifted only: {drifted_ok}/{drifted} = {drifted_ok / drifted:.1%}); "
        f"wrong applications: {wrong}; wrong copies refused: "
        f"{results.get('content', Outcome()).refused}/{kinds['content']}"
    )


if __name__ == "__main__":
    main()
