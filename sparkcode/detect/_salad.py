"""``word_salad``: real words in an order no grammar produces.

A model whose state is corrupted (a prefix-cache restore from the wrong
position, a broken kernel) or that samples far too hot can emit fluent-looking
text: real English words, normal punctuation, no loops and no odd characters,
but in meaningless order. The other checks see nothing wrong with it.

What is missing is the dependency between neighbouring words. Each word is
reduced to a class (:mod:`._salad_tokens`: a function word, or the shape of a
content word) and every transition between two classes is scored by its
pointwise mutual information, ``log P(next | prev) / P(next)``, from a table
learned on English technical prose (``python -m bench.codegen.salad_table``). In
real prose the transitions carry information and the mean score is positive (its mean is
the mutual information of neighbouring classes); in words that follow each
other at random it is negative (minus the mean divergence of the true
next-class distributions from the marginal one). The check averages the score
over a sliding window of prose tokens and fires when the mean falls below
``salad_threshold``. Word-pair chains keep every neighbouring pair plausible
and score only a little lower than prose; they are caught by a second arm:
a weak mean (below ``salad_drift_threshold``) while the content words keep no
topic (:class:`Recurrence`).

Only prose is judged: identifiers, paths, numbers, words next to code
punctuation (``foo(``, ``a.b``, ``x = y``), backquoted code and long all-caps
words are not prose. Code fences are not excluded as such: code rules itself
out, and salad that starts inside an open fence is still caught. A window
only counts when at least
``salad_min_prose`` of its tokens are scored transitions between prose
words. Table cells, list items, headings and comma enumerations break the
chain (:func:`~._salad_tokens.classify`). The work per word is a few
dictionary and table look-ups and a few additions.
"""

from __future__ import annotations

import base64
import zlib
from collections import deque
from functools import cache

from ._config import DetectorConfig, Verdict
from ._salad_table import CLASSES as TABLE_CLASSES
from ._salad_table import SCALE, TABLE
from ._salad_tokens import CLASSES, COMMA, CONTENT, INDEX, classify
from ._words import Word, WordStream

_COMMA = INDEX[COMMA]

# A ring entry: the transition's score in 1/SCALE nats (integers, so the
# running sum never drifts), or None for a non-prose word or a break.
Entry = int | None


@cache
def pmi_table() -> tuple[int, ...]:
    """Transition scores in 1/:data:`SCALE` nats, row-major: ``[prev * len(CLASSES) + next]``."""
    if TABLE_CLASSES != CLASSES:
        raise RuntimeError(
            "the word_salad table is stale: rerun python -m bench.codegen.salad_table"
        )
    raw = zlib.decompress(base64.b64decode(TABLE))
    if len(raw) != len(CLASSES) ** 2:
        raise RuntimeError(
            "the word_salad table is damaged: rerun python -m bench.codegen.salad_table"
        )
    return tuple(b - 256 if b > 127 else b for b in raw)


class ProseTransitions:
    """Turns finished words into class transitions, tracking the run of prose.

    :meth:`on_word` returns the transitions the word adds, each ``(prev, next)``
    as class indices with ``prev`` -1 where a run of prose starts (a gap's
    punctuation, then the word), or ``None`` when the word is not prose.
    ``bench/codegen/salad_table.py`` learns its table from exactly these transitions
    (:func:`prose_transitions`).
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._prev = -1
        self._sentence_start = True
        self._clause_words = 0  # words since the last comma, full stop or break

    def on_word(self, word: Word) -> tuple[tuple[int, int], ...] | None:
        got = classify(word, self._sentence_start)
        if got is None:
            self._prev = -1
            self._sentence_start = True
            self._clause_words = 0
            return None
        breaks, punct, kind = got
        if kind < 0:
            return ()
        # One word between two commas is an enumeration (``class, cursor, style``),
        # whose order is arbitrary: its items start new runs.
        single = punct == _COMMA and self._clause_words == 1
        prev = -1 if breaks or single else self._prev
        self._clause_words = 1 if breaks or punct >= 0 else self._clause_words + 1
        self._prev = kind
        self._sentence_start = False
        if punct < 0:
            return ((prev, kind),)
        return ((prev, punct), (punct, kind))


class Recurrence:
    """How often content words come back: the topic arm of the check.

    Real text is about something, so its content words recur (``socket`` ...
    ``socket``); words strung together by a sampler are drawn afresh from the
    whole vocabulary and rarely meet again. For each of the last
    ``salad_topic_words`` content words (5+ letters) it records whether the
    same word was among the ``salad_memory_words`` content words before it.
    """

    def __init__(self, config: DetectorConfig) -> None:
        self._cfg = config
        self.reset()

    def reset(self) -> None:
        self._memory: deque[str] = deque()
        self._counts: dict[str, int] = {}
        self._hits: deque[bool] = deque()
        self.recurring = 0

    def state_size(self) -> int:
        return len(self._memory) + len(self._counts) + len(self._hits)

    @property
    def words(self) -> int:
        """Content words in the window."""
        return len(self._hits)

    def add(self, text: str) -> None:
        word = text.lower()
        counts = self._counts
        hit = word in counts
        self._hits.append(hit)
        self.recurring += hit
        if len(self._hits) > self._cfg.salad_topic_words:
            self.recurring -= self._hits.popleft()
        self._memory.append(word)
        counts[word] = counts.get(word, 0) + 1
        if len(self._memory) > self._cfg.salad_memory_words:
            gone = self._memory.popleft()
            counts[gone] -= 1
            if not counts[gone]:
                del counts[gone]


class SaladCheck:
    """``word_salad``: the mean transition score of the last prose window is too low."""

    def __init__(self, config: DetectorConfig) -> None:
        self._cfg = config
        self._width = len(CLASSES)
        self._table = pmi_table()
        self._tokens = ProseTransitions()
        self._topic = Recurrence(config)
        self.reset()

    def reset(self) -> None:
        self._tokens.reset()
        self._topic.reset()
        self._ring: deque[tuple[Entry, int]] = deque()  # (score, start of its word)
        self._sum = 0
        self._scored = 0

    def state_size(self) -> int:
        """Number of stored items (bounded by the window sizes)."""
        return len(self._ring) + self._topic.state_size()

    def on_word(self, word: Word) -> Verdict | None:
        got = self._tokens.on_word(word)
        if got is None:
            self._push(None, word.start)
            return None
        if not got:
            return None
        for prev, index in got:
            score = None if prev < 0 else self._table[prev * self._width + index]
            self._push(score, word.start)
        if got[-1][1] in CONTENT and word.length >= 5:
            self._topic.add(word.text)
        return self._judge(word)

    def _push(self, score: Entry, start: int) -> None:
        ring = self._ring
        ring.append((score, start))
        if score is not None:
            self._sum += score
            self._scored += 1
        if len(ring) > self._cfg.salad_window:
            gone, _ = ring.popleft()
            if gone is not None:
                self._sum -= gone
                self._scored -= 1

    def _judge(self, word: Word) -> Verdict | None:
        cfg = self._cfg
        if self._scored < cfg.salad_min_prose * cfg.salad_window:
            return None
        mean = self._sum / (self._scored * SCALE)
        topic = self._topic
        if mean < cfg.salad_threshold:
            why = "words in no grammatical order"
        elif (
            mean < cfg.salad_drift_threshold
            and topic.words >= cfg.salad_topic_words
            and topic.recurring <= cfg.salad_recurring
        ):
            why = (
                f"words that keep no topic ({topic.recurring} of the last {topic.words} "
                f"content words recur) in weak grammatical order"
            )
        else:
            return None
        start = self._ring[0][1]
        return Verdict(
            True,
            "word_salad",
            f"{why}: mean transition score {mean:.2f} nats over the last "
            f"{self._scored} prose tokens (normal prose: 0.3 and above)",
            position=word.end,
            start=start,
            chars_seen=word.end,
            extra={
                "mean_pmi": round(mean, 3),
                "tokens": self._scored,
                "recurring": topic.recurring,
                "content_words": topic.words,
            },
        )


def prose_transitions(text: str) -> list[tuple[int, int]]:
    """Every class transition ``(prev, next)`` the check scores in a finished ``text``
    (``prev`` -1 where a run of prose starts), indices into :data:`CLASSES`.

    Public on purpose: ``bench/codegen/salad_table.py`` learns the table from
    exactly these, so the learner and the check cannot tokenize differently."""
    words, transitions = WordStream(), ProseTransitions()
    found: list[tuple[int, int]] = []
    for word in words.feed(text) + words.finish():
        found.extend(transitions.on_word(word) or [])
    return found
