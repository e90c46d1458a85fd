"""Streaming word splitter and the word-level loop checks.

A *word* is a maximal run of ``\\w`` characters (letters, digits, underscore).
Words longer than :data:`MAX_WORD` are kept as head + tail, so a pending word
costs bounded memory even when a degenerate stream never ends one.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass

from ._config import DetectorConfig, Verdict

MAX_WORD = 64
MAX_GAP = 16
_HEAD = 48
_TAIL = MAX_WORD - _HEAD
_WORD = re.compile(r"\w+")
_FENCE = re.compile(r"```")


@dataclass(frozen=True, slots=True)
class Word:
    """One finished word and its surroundings."""

    text: str
    """The word, or head + tail when it is longer than :data:`MAX_WORD`."""
    length: int
    start: int
    end: int
    prev: str
    """The character before the word (``""`` at the start of the text)."""
    next: str
    """The character after the word (``""`` at the end of the text)."""
    in_fence: bool
    """Inside a Markdown ``````` code fence."""
    gap: str = ""
    """The characters between the previous word and this one (``", "``,
    ``".\\n\\n"``); head + tail when longer than :data:`MAX_GAP`."""


def _clip(text: str) -> str:
    return text if len(text) <= MAX_WORD else text[:_HEAD] + text[-_TAIL:]


def _clip_gap(text: str) -> str:
    """Head and tail of a gap: the punctuation after a word and the indentation before one."""
    half = MAX_GAP // 2
    return text if len(text) <= MAX_GAP else text[:half] + text[-half:]


class WordStream:
    """Turns text deltas into finished :class:`Word` objects, in order."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._pos = 0
        self._last = ""  # last character seen
        self._fence_tail = ""  # up to two trailing backticks
        self._in_fence = False
        self._gap = ""  # non-word characters since the last word (clipped)
        # text (clipped), length, start, previous char, in fence, gap
        self._pending: tuple[str, int, int, str, bool, str] | None = None

    def state_size(self) -> int:
        """Number of stored characters (bounded by :data:`MAX_WORD`)."""
        return (
            (len(self._pending[0]) if self._pending else 0)
            + len(self._fence_tail)
            + len(self._gap)
            + 1
        )

    def feed(self, delta: str) -> list[Word]:
        if not delta:
            return []
        out: list[Word] = []
        base = self._pos
        if self._pending is not None and not _WORD.match(delta):
            self._flush_into(out, delta[0])
        toggles = self._fence_toggles(delta, base)
        fence = self._in_fence
        t = 0
        end = 0  # end of the last word in this delta
        for m in _WORD.finditer(delta):
            a, b = m.start(), m.end()
            while t < len(toggles) and toggles[t] <= base + a:
                fence = not fence
                t += 1
            piece = m.group()
            if a == 0 and self._pending is not None:
                ptext, plen, start, prev, in_fence, gap = self._pending
                self._pending = None
                if plen <= MAX_WORD:
                    text = _clip(ptext + piece)
                else:  # ptext is already head + tail
                    text = ptext[:_HEAD] + (ptext[_HEAD:] + piece)[-_TAIL:]
                length = plen + len(piece)
            else:
                text, length, start = _clip(piece), len(piece), base + a
                prev = delta[a - 1] if a else self._last
                in_fence = fence
                gap = _clip_gap(self._gap + delta[end:a])
                self._gap = ""
            end = b
            if b == len(delta):
                self._pending = (text, length, start, prev, in_fence, gap)
            else:
                out.append(Word(text, length, start, start + length, prev, delta[b], in_fence, gap))
        if end < len(delta):
            self._gap = _clip_gap(self._gap + delta[end:])
        self._in_fence ^= len(toggles) % 2 == 1
        self._pos += len(delta)
        self._last = delta[-1]
        return out

    def finish(self) -> list[Word]:
        """Finish the pending word (at the end of the text)."""
        out: list[Word] = []
        self._flush_into(out, "")
        return out

    def _flush_into(self, out: list[Word], next_char: str) -> None:
        if self._pending is None:
            return
        text, length, start, prev, in_fence, gap = self._pending
        self._pending = None
        out.append(Word(text, length, start, start + length, prev, next_char, in_fence, gap))

    def _fence_toggles(self, delta: str, base: int) -> list[int]:
        """Offsets just past each triple backtick (one may straddle two deltas)."""
        s = self._fence_tail + delta
        shift = base - len(self._fence_tail)
        matches = list(_FENCE.finditer(s))
        rest = s[matches[-1].end() :] if matches else s
        ticks = len(rest) - len(rest.rstrip("`"))
        self._fence_tail = "`" * min(ticks, 2)
        return [shift + m.end() for m in matches]


def _has_word_letters(text: str) -> bool:
    """Two neighbouring letters: a word, not a number or a one-letter name."""
    return any(a.isalpha() and b.isalpha() for a, b in zip(text, text[1:], strict=False))


class LoopCheck:
    """``subword_repeat`` (whole words), ``phrase_loop`` and ``block_loop``.

    For every period ``n`` (in words) it counts how many consecutive words equal
    the word ``n`` earlier, like :class:`~._chars.RepetitionCheck` does for
    characters: ``k`` back-to-back copies of an ``n``-word phrase make that
    count reach ``(k - 1) * n``. Only periods at which the current word
    occurred recently are touched, through a map of recent word positions.
    """

    def __init__(self, config: DetectorConfig) -> None:
        self._cfg = config
        self._span = max(config.block_max_words, config.phrase_max_words, 1)
        self.reset()

    def reset(self) -> None:
        size = self._span + 1
        self._count = 0
        self._ring: list[Word | None] = [None] * size
        self._recent: dict[str, deque[int]] = {}
        self._run_len = [0] * size
        self._run_last = [-2] * size
        self._run_start = [0] * size

    def state_size(self) -> int:
        """Number of stored items (bounded by ``block_max_words``)."""
        return len(self._ring) + sum(len(d) for d in self._recent.values()) + len(self._recent)

    def on_word(self, word: Word) -> Verdict | None:
        span, size = self._span, self._span + 1
        w = self._count
        self._count += 1
        old = self._ring[w % size]
        if old is not None:  # evict the word that falls out of the window
            dq = self._recent[old.text]
            dq.popleft()
            if not dq:
                del self._recent[old.text]
        self._ring[w % size] = word
        previous = self._recent.setdefault(word.text, deque())
        verdict = None
        for j in reversed(previous):
            n = w - j
            if n > span:
                break
            if self._run_last[n] == w - 1:
                self._run_len[n] += 1
            else:
                self._run_len[n] = 1
                first = self._ring[j % size]
                assert first is not None
                self._run_start[n] = first.start
            self._run_last[n] = w
            if verdict is None:
                verdict = self._judge(n, word)
        previous.append(w)
        return verdict

    def _judge(self, n: int, word: Word) -> Verdict | None:
        cfg = self._cfg
        run = self._run_len[n]
        copies = (run + n) // n
        start, end = self._run_start[n], word.end
        if n == 1:
            # Numbers and one-letter names repeat across rows of data literals
            # (``[0, 0, 0],\n[0, 0, 0]``) and escapes repeat in string tables
            # (``'\\ufffe'``); the character check covers their loops.
            if copies >= cfg.subword_repeats and _has_word_letters(word.text) and word.prev != "\\":
                return Verdict(
                    True,
                    "subword_repeat",
                    f"word {word.text!r} repeated {copies} times in a row",
                    position=end,
                    start=start,
                    chars_seen=end,
                    extra={"unit": word.text, "repeats": copies},
                )
            return None
        phrase_ok = (
            cfg.phrase_min_words <= n <= cfg.phrase_max_words
            and copies >= cfg.phrase_repeats
            and end > 0
            and (end - start) / end >= cfg.phrase_coverage
        )
        block_ok = copies >= cfg.block_repeats and end - start >= cfg.block_min_chars
        many = copies >= cfg.block_any_repeats
        if not (phrase_ok or block_ok or many):
            return None
        if self._run_last[1] == self._count - 1 and self._run_len[1] >= n - 1:
            return None  # one word over and over: the n == 1 period decides
        words = self._last_words(n)
        if not (phrase_ok or block_ok or any(_has_word_letters(x.text) for x in words)):
            return None
        shown = " ".join(x.text for x in words[:8]) + (" ..." if n > 8 else "")
        if phrase_ok:
            pattern = "phrase_loop"
            detail = (
                f"{n}-word phrase {shown!r} repeated {copies} times, "
                f"covering {100 * (end - start) / end:.0f}% of the text"
            )
        else:
            pattern = "block_loop"
            detail = f"{n}-word block {shown!r} repeated {copies} times ({end - start} chars)"
        return Verdict(
            True,
            pattern,
            detail,
            position=end,
            start=start,
            chars_seen=end,
            extra={"unit": shown, "words": n, "repeats": copies},
        )

    def _last_words(self, n: int) -> list[Word]:
        size = self._span + 1
        last = self._count - 1
        out = [self._ring[(last - k) % size] for k in range(n - 1, -1, -1)]
        return [x for x in out if x is not None]
