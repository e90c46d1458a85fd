"""How the degeneration detector is scored on the corpus: its targets, and the counts.

Shared on purpose by ``bench/studies/detector_rates.py`` (the full corpus, the doc's
figures) and ``tests/sparkcode/detect/test_corpus_sample.py`` (a small slice in CI).
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from bench.corpora.detector_corpus import Sample
from sparkcode.detect import Verdict, detect_text

FP_TARGET = 0.01
DETECTION_TARGET = 0.95


@dataclass
class Rates:
    """Outcome of running the detector over a corpus."""

    normal: int = 0
    false_positives: int = 0
    degenerate: int = 0
    detected: int = 0
    by_kind: dict[str, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
    patterns: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    flagged_normal: list[tuple[Sample, Verdict]] = field(default_factory=list)
    missed: list[Sample] = field(default_factory=list)
    chars: int = 0
    seconds: float = 0.0

    @property
    def fp_rate(self) -> float:
        return self.false_positives / self.normal if self.normal else 0.0

    @property
    def detection_rate(self) -> float:
        return self.detected / self.degenerate if self.degenerate else 0.0


def evaluate(samples: list[Sample]) -> Rates:
    """Run the detector on every sample; count hits per label, kind and pattern."""
    rates = Rates()
    for sample in samples:
        start = time.perf_counter()
        verdict = detect_text(sample.text)
        rates.seconds += time.perf_counter() - start
        rates.chars += len(sample.text)
        counts = rates.by_kind[f"{sample.label}/{sample.kind}"]
        counts[1] += 1
        if verdict.degenerate:
            counts[0] += 1
            rates.patterns[sample.label][verdict.pattern] += 1
        if sample.label == "normal":
            rates.normal += 1
            if verdict.degenerate:
                rates.false_positives += 1
                rates.flagged_normal.append((sample, verdict))
        else:
            rates.degenerate += 1
            if verdict.degenerate:
                rates.detected += 1
            else:
                rates.missed.append(sample)
    return rates
