"""The one place a live stream is watched for degeneration.

The agent's :class:`~sparkcode.agent.core._request.Request` feeds every streamed
delta here once (content and reasoning each to their own
:class:`~sparkcode.detect.DegenerationDetector`) and turns a verdict into a
:class:`DegenerationDetected` event; the TUI only draws that event. ``mode`` is
the ``/degenerate`` setting: ``off`` feeds nothing, ``warn`` reports, ``stop``
reports with ``stopped`` so the caller closes the stream. The first verdict is
the only one: after it the watch feeds nothing more.
"""

from __future__ import annotations

from typing import Literal

from ...config import DegenerateMode
from ...detect import DegenerationDetector
from .events import DegenerationDetected

Channel = Literal["content", "reasoning"]


class StreamWatch:
    """Feeds one stream's deltas to a detector per channel, until the first verdict."""

    def __init__(self, mode: DegenerateMode) -> None:
        self.mode = mode
        self.fired: DegenerationDetected | None = None
        """The verdict, once a detector fired."""
        self._detectors: dict[Channel, DegenerationDetector] = {
            "content": DegenerationDetector(),
            "reasoning": DegenerationDetector(),
        }

    @property
    def watching(self) -> bool:
        """Deltas are still fed: the mode is not ``off`` and nothing fired yet."""
        return self.mode != "off" and self.fired is None

    def feed(self, content: str, reasoning: str) -> DegenerationDetected | None:
        """The event for the delta that made a detector fire, else None."""
        if not self.watching:
            return None
        channels: tuple[tuple[Channel, str], ...] = (("reasoning", reasoning), ("content", content))
        for channel, text in channels:
            if not text:
                continue
            detector = self._detectors[channel]
            verdict = detector.feed(text)
            if verdict is not None and verdict.degenerate:
                self.fired = DegenerationDetected(
                    channel=channel,
                    pattern=verdict.pattern,
                    detail=verdict.detail,
                    chars=detector.chars_seen,
                    stopped=self.mode == "stop",
                )
                return self.fired
        return None
