"""A small, fast version of ``bench/studies/detector_rates.py``: catches rate regressions in CI.

The full benchmark runs 2000 normal and 1000 degenerate samples; this runs a
seeded sample from the same corpus builder with the same targets, with a
little slack for the small sample size.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.corpora.detector_corpus import DEGENERATE_KINDS, MIN_CHARS, build, load, write
from bench.corpora.detector_scoring import Rates, evaluate


@pytest.fixture(scope="module")
def rates() -> Rates:
    return evaluate(build(seed=11, normal=150, degenerate=8 * len(DEGENERATE_KINDS), doc_files=60))


def test_false_positive_rate_on_normal_sample(rates: Rates) -> None:
    assert rates.normal >= 140
    flagged = [(s.name, v.pattern, v.detail) for s, v in rates.flagged_normal]
    assert rates.fp_rate <= 0.02, flagged


def test_detection_rate_on_degenerate_sample(rates: Rates) -> None:
    assert rates.degenerate == 8 * len(DEGENERATE_KINDS)
    missed = [(s.name, s.detail) for s in rates.missed]
    assert rates.detection_rate >= 0.9, missed
    for kind in DEGENERATE_KINDS:  # every kind of garbage is caught at least mostly
        hit, total = rates.by_kind[f"degenerate/{kind}"]
        assert hit >= total - 2, (kind, hit, total)


def test_corpus_is_deterministic_and_round_trips(tmp_path: Path) -> None:
    first = build(seed=5, normal=20, degenerate=16, doc_files=20)
    again = build(seed=5, normal=20, degenerate=16, doc_files=20)
    other = build(seed=6, normal=20, degenerate=16, doc_files=20)
    assert first == again
    assert [s.text for s in first] != [s.text for s in other]
    assert all(MIN_CHARS // 2 <= len(s.text) for s in first if s.label == "normal")
    write(first, tmp_path / "corpus")
    assert load(tmp_path / "corpus") == first
