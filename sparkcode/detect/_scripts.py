"""Script anomalies: words that mix writing systems, and token salad.

Broken model state often shows up as subword tokens from the wrong language
glued into identifiers (``calcулate_total``, ``get计算Value``) or as a salad of
tokens from many languages. Both are judged per finished word.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import Counter, deque

from ._config import DetectorConfig, Verdict
from ._words import Word

LATIN, GREEK, CYRILLIC, CJK, OTHER = "Latin", "Greek", "Cyrillic", "CJK", "Other"
COMMON = ""

# (first code point, script) sorted by code point; each entry runs to the next.
_RANGES: list[tuple[int, str]] = [
    (0x0000, COMMON),
    (0x0041, LATIN),
    (0x005B, COMMON),
    (0x0061, LATIN),
    (0x007B, COMMON),
    (0x00C0, LATIN),
    (0x02B0, COMMON),
    (0x0370, GREEK),
    (0x0400, CYRILLIC),
    (0x0530, "Armenian"),
    (0x0590, "Hebrew"),
    (0x0600, "Arabic"),
    (0x0700, OTHER),
    (0x0750, "Arabic"),
    (0x0780, OTHER),
    (0x08A0, "Arabic"),
    (0x0900, "Indic"),
    (0x0E00, "Thai"),
    (0x0E80, OTHER),
    (0x10A0, "Georgian"),
    (0x1100, CJK),
    (0x1200, OTHER),
    (0x1C80, CYRILLIC),
    (0x1C90, OTHER),
    (0x1E00, LATIN),
    (0x1F00, GREEK),
    (0x2000, COMMON),
    (0x2C60, LATIN),
    (0x2C80, OTHER),
    (0x2DE0, CYRILLIC),
    (0x2E00, COMMON),
    (0x2E80, CJK),
    (0xA000, OTHER),
    (0xA640, CYRILLIC),
    (0xA6A0, OTHER),
    (0xA720, LATIN),
    (0xA800, OTHER),
    (0xAC00, CJK),
    (0xD7B0, OTHER),
    (0xF900, CJK),
    (0xFB00, LATIN),
    (0xFB50, "Arabic"),
    (0xFE00, COMMON),
    (0xFE70, "Arabic"),
    (0xFF00, COMMON),
    (0xFF21, LATIN),
    (0xFF3B, COMMON),
    (0xFF41, LATIN),
    (0xFF5B, COMMON),
    (0xFF66, CJK),
    (0xFFA0, OTHER),
    (0x10000, OTHER),
    (0x20000, CJK),
    (0x40000, OTHER),
]
_STARTS = [start for start, _ in _RANGES]
_SEGMENT = re.compile(r"[\d_]+")


def script_of(c: str) -> str:
    """The writing system of a letter (``""`` for digits, marks and other non-letters)."""
    if c < "\x80":
        return LATIN if c.isalpha() else COMMON
    if not c.isalpha():
        return COMMON
    return _RANGES[bisect_right(_STARTS, ord(c)) - 1][1]


def _scripts(segment: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    for c in segment:
        s = script_of(c)
        if s:
            counts[s] += 1
    return counts


def _cjk_inside_latin(segment: str) -> bool:
    """CJK letters with Latin letters on both sides (``calc计算ulate``)."""
    kinds = [script_of(c) for c in segment]
    try:
        first = kinds.index(LATIN)
    except ValueError:
        return False
    last = len(kinds) - 1 - kinds[::-1].index(LATIN)
    return CJK in kinds[first:last]


def mixes_scripts(word: Word) -> bool:
    """Whether ``word`` glues two writing systems together in one identifier piece.

    The word is cut at digits and underscores first (``x_значение`` is fine).
    Latin with CJK counts only inside a code fence or when the CJK sits inside
    the Latin (Chinese prose writes ``调用Python函数`` without spaces); one Greek
    letter beside Latin is a math symbol (``Δx``, ``μs``).
    """
    if word.text.isascii():
        return False
    for segment in _SEGMENT.split(word.text):
        if segment.isascii():
            continue
        counts = _scripts(segment)
        if len(counts) < 2:
            continue
        kinds = set(counts)
        if kinds == {LATIN, CJK}:
            if word.in_fence or _cjk_inside_latin(segment):
                return True
            continue
        if kinds == {LATIN, GREEK} and counts[GREEK] == 1:
            continue
        return True
    return False


def primary_script(text: str) -> str:
    """The script of the first letter of ``text`` (``""`` when it has none)."""
    if text.isascii():
        return LATIN if any(c.isalpha() for c in text) else COMMON
    for c in text:
        s = script_of(c)
        if s:
            return s
    return COMMON


class ScriptCheck:
    """``mixed_script`` and ``script_churn`` over finished words."""

    def __init__(self, config: DetectorConfig) -> None:
        self._cfg = config
        self.reset()

    def reset(self) -> None:
        self._mixed: deque[tuple[int, str]] = deque()
        self._recent: deque[str] = deque()
        self._kinds: Counter[str] = Counter()
        self._switches = 0

    def state_size(self) -> int:
        """Number of stored items (bounded by the window sizes)."""
        return len(self._mixed) + len(self._recent) + len(self._kinds)

    def on_word(self, word: Word) -> Verdict | None:
        cfg = self._cfg
        if mixes_scripts(word):
            self._mixed.append((word.end, word.text))
            while self._mixed[0][0] <= word.end - cfg.mixed_script_window:
                self._mixed.popleft()
            if len(self._mixed) >= cfg.mixed_script_words:
                shown = ", ".join(repr(t) for _, t in list(self._mixed)[-3:])
                return Verdict(
                    True,
                    "mixed_script",
                    f"{len(self._mixed)} words mixing writing systems "
                    f"within {cfg.mixed_script_window} chars: {shown}",
                    position=word.end,
                    start=word.start,
                    chars_seen=word.end,
                    extra={"words": len(self._mixed)},
                )
        return self._churn(word)

    def _churn(self, word: Word) -> Verdict | None:
        cfg = self._cfg
        kind = primary_script(word.text)
        if not kind:
            return None
        recent = self._recent
        if recent and recent[-1] != kind:
            self._switches += 1
        recent.append(kind)
        self._kinds[kind] += 1
        if len(recent) > cfg.churn_window_words:
            gone = recent.popleft()
            if recent[0] != gone:
                self._switches -= 1
            self._kinds[gone] -= 1
            if not self._kinds[gone]:
                del self._kinds[gone]
        if self._switches >= cfg.churn_switches and len(self._kinds) >= cfg.churn_scripts:
            names = ", ".join(sorted(self._kinds))
            return Verdict(
                True,
                "script_churn",
                f"{self._switches} script changes in the last {len(recent)} words ({names})",
                position=word.end,
                start=word.start,
                chars_seen=word.end,
                extra={"switches": self._switches},
            )
        return None
