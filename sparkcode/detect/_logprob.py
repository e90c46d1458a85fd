"""``logprob_collapse``: the model's confidence falls off a cliff.

When a stream carries per-token logprobs, a degenerate turn often shows a
sudden, sustained drop: the rolling mean of the last few tokens falls far
below the mean of everything the model produced before them.
"""

from __future__ import annotations

import math
from collections import deque

from ._config import DetectorConfig, Verdict


class LogprobCheck:
    """Rolling mean of the last ``logprob_window`` tokens against the running baseline.

    The baseline is the mean of every logprob that has left the window, so the
    collapse being measured never dilutes its own reference.
    """

    def __init__(self, config: DetectorConfig) -> None:
        self._cfg = config
        self.reset()

    def reset(self) -> None:
        self._window: deque[float] = deque()
        self._window_sum = 0.0
        self._base_sum = 0.0
        self._base_count = 0
        self.tokens = 0

    def state_size(self) -> int:
        """Number of stored items (bounded by ``logprob_window``)."""
        return len(self._window)

    def feed(self, logprobs: list[float], position: int) -> Verdict | None:
        """Add the logprobs of the tokens that end at character ``position``."""
        cfg = self._cfg
        verdict = None
        for value in logprobs:
            lp = float(value)
            if math.isnan(lp):
                continue
            lp = max(lp, -100.0)  # -inf (a zero-probability token) would poison the sums
            self.tokens += 1
            self._window.append(lp)
            self._window_sum += lp
            if len(self._window) > cfg.logprob_window:
                old = self._window.popleft()
                self._window_sum -= old
                self._base_sum += old
                self._base_count += 1
            if (
                verdict is None
                and self._base_count >= cfg.logprob_baseline_min
                and len(self._window) == cfg.logprob_window
            ):
                mean = self._window_sum / cfg.logprob_window
                base = self._base_sum / self._base_count
                if mean <= base - cfg.logprob_drop and mean <= cfg.logprob_floor:
                    verdict = Verdict(
                        True,
                        "logprob_collapse",
                        f"mean logprob of the last {cfg.logprob_window} tokens is {mean:.2f}, "
                        f"against a baseline of {base:.2f} over {self._base_count} tokens",
                        position=position,
                        start=position,
                        chars_seen=position,
                        extra={"window_mean": round(mean, 3), "baseline": round(base, 3)},
                    )
        return verdict
