"""The streaming degeneration detector that combines every check."""

from __future__ import annotations

from ._chars import RepetitionCheck, SymbolCheck
from ._config import PATTERNS, DetectorConfig, Verdict
from ._logprob import LogprobCheck
from ._salad import SaladCheck
from ._scripts import ScriptCheck
from ._words import LoopCheck, Word, WordStream


class DegenerationDetector:
    """Watches a streamed answer for degenerate output, a little at a time.

    Call :meth:`feed` with each text delta as it arrives (and the delta's token
    logprobs when the request asked for them); it returns a :class:`Verdict` the
    first time a check fires and ``None`` otherwise. Call :meth:`finish` at the
    end of the text so a final word is judged too. Work per character is
    constant and memory is bounded, so a 1 MB answer costs what 1 KB costs per
    character. Once a verdict is reached the detector stops checking; the
    verdict stays in :attr:`verdict` until :meth:`reset`.

    Feeding the same text in any split gives the same verdict and position
    (logprob collapse aside: it fires at the end of the delta carrying the
    evidence).
    """

    def __init__(self, config: DetectorConfig | None = None) -> None:
        self.config = config or DetectorConfig()
        self._repetition = RepetitionCheck(self.config)
        self._symbols = SymbolCheck(self.config)
        self._words = WordStream()
        self._loops = LoopCheck(self.config)
        self._scripts = ScriptCheck(self.config)
        self._salad = SaladCheck(self.config)
        self._logprobs = LogprobCheck(self.config)
        self._seen = 0
        self._fired: Verdict | None = None

    def reset(self) -> None:
        """Forget everything, ready for a new answer."""
        for part in (
            self._repetition,
            self._symbols,
            self._words,
            self._loops,
            self._scripts,
            self._salad,
            self._logprobs,
        ):
            part.reset()
        self._seen = 0
        self._fired = None

    @property
    def chars_seen(self) -> int:
        """Characters fed so far."""
        return self._seen

    @property
    def verdict(self) -> Verdict:
        """The verdict so far: the first check that fired, or a clean one."""
        if self._fired is not None:
            return self._fired
        return Verdict(
            False, "none", f"no degeneration in {self._seen} characters", chars_seen=self._seen
        )

    def feed(self, text_delta: str, logprobs: list[float] | None = None) -> Verdict | None:
        """Add the next piece of the answer; return the verdict when a check first fires."""
        if self._fired is not None:
            self._seen += len(text_delta)
            return None
        hits: list[Verdict] = []
        if text_delta:
            for check in (self._repetition, self._symbols):
                hit = check.feed(text_delta)
                if hit is not None:
                    hits.append(hit)
            hits.extend(self._judge_words(self._words.feed(text_delta)))
        self._seen += len(text_delta)
        if logprobs:
            hit = self._logprobs.feed(logprobs, self._seen)
            if hit is not None:
                hits.append(hit)
        return self._settle(hits)

    def finish(self) -> Verdict:
        """Judge the last word of the text and return the final verdict.

        It marks the end of the text: :meth:`reset` before feeding another one.
        """
        if self._fired is None:
            self._settle(self._judge_words(self._words.finish()))
        return self.verdict

    def state_size(self) -> int:
        """Items held in all internal buffers; bounded whatever the input length."""
        return sum(
            part.state_size()
            for part in (
                self._repetition,
                self._symbols,
                self._words,
                self._loops,
                self._scripts,
                self._salad,
                self._logprobs,
            )
        )

    def _judge_words(self, words: list[Word]) -> list[Verdict]:
        for word in words:
            for check in (self._loops, self._scripts, self._salad):
                hit = check.on_word(word)
                if hit is not None:
                    return [hit]
        return []

    def _settle(self, hits: list[Verdict]) -> Verdict | None:
        if not hits:
            return None
        # The earliest evidence wins, so any split of the text gives one answer.
        first = min(hits, key=lambda v: (v.position or 0, PATTERNS.index(v.pattern)))
        self._fired = Verdict(
            first.degenerate,
            first.pattern,
            first.detail,
            position=first.position,
            start=first.start,
            chars_seen=self._seen,
            extra=first.extra,
        )
        return self._fired


def detect_text(text: str, config: DetectorConfig | None = None) -> Verdict:
    """Run the detector over a whole text and return its verdict."""
    detector = DegenerationDetector(config)
    detector.feed(text)
    return detector.finish()
