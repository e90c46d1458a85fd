"""Summary statistics shared by the benchmarks."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np


def spread(values: Sequence[float | None]) -> dict[str, Any]:
    """min / median / max (and n) of the values that are not None."""
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return {"n": 0, "min": None, "median": None, "max": None}
    return {"n": len(xs), "min": min(xs), "median": statistics.median(xs), "max": max(xs)}


def bootstrap_ratio(
    numerators: Sequence[float],
    denominators: Sequence[float],
    *,
    resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float] | None:
    """Percentile confidence interval of sum(num) / sum(den), resampling the units
    (chunks of text, whose tokens are not independent of each other)."""
    num = np.asarray(numerators, dtype=np.float64)
    den = np.asarray(denominators, dtype=np.float64)
    if len(num) < 2 or den.sum() <= 0:
        return None
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(num), size=(resamples, len(num)))
    sums = den[picks].sum(axis=1)
    ratios = num[picks].sum(axis=1) / np.where(sums > 0, sums, np.nan)
    tail = (1.0 - level) / 2 * 100
    low, high = np.nanpercentile(ratios, [tail, 100 - tail])
    return float(low), float(high)
