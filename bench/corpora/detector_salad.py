"""Word-salad tails for the detector corpus: real words in meaningless order.

A model whose state is corrupted, or that samples far too hot, can emit text
made of real English words with normal punctuation and capitals, no loops and
no odd characters, whose word order means nothing. Three constructions, all
from the standard-library docstrings the normal prose comes from, so the
vocabulary is exactly that of the normal samples:

``salad_unigram``
    Words drawn independently by their frequency in the docstrings.
``salad_shuffled``
    A real docstring passage with its words shuffled: the topic stays, the
    order goes.
``salad_bigram``
    A first-order Markov chain over docstring word pairs: every neighbouring
    pair occurred in real text, nothing longer did.

Each is cut into sentences of 4-24 words with a capital first word, commas
now and then, a full stop (sometimes ``?`` or ``!``), wrapped into lines and
paragraphs like a model's answer.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable
from typing import Protocol

_WORD = re.compile(r"[A-Za-z]+(?:'[a-z]+)?")


class _Source(Protocol):
    rng: random.Random

    def docstrings(self) -> list[str]: ...

    def prose(self, length: int) -> str: ...


def _length(rng: random.Random) -> int:
    """Characters of salad: log-uniform over 400-3000."""
    return int(round(math.exp(rng.uniform(math.log(400), math.log(3000)))))


def _words_of(text: str) -> list[str]:
    """The prose words of ``text`` (letters, contractions), lower-cased unless a name."""
    out = []
    for w in _WORD.findall(text):
        out.append(w if w.isupper() and len(w) > 1 else w.lower())
    return out


def punctuate(words: list[str], rng: random.Random) -> str:
    """Sentences, commas, capitals, wrapped lines and paragraphs around ``words``."""
    out: list[str] = []
    line = 0  # characters on the current line
    left = 0  # words left in the current sentence
    for word in words:
        if left == 0:
            left = rng.randint(4, 24)
            word = word[:1].upper() + word[1:]
        left -= 1
        if left == 0:
            word += rng.choices([".", "?", "!"], [0.9, 0.05, 0.05])[0]
        elif rng.random() < 0.08:
            word += ","
        if line and line + len(word) + 1 > 72:
            out.append("\n")
            line = 0
        elif line:
            out.append(" ")
            line += 1
        out.append(word)
        line += len(word)
        if left == 0 and rng.random() < 0.15:
            out.append("\n\n")  # a new paragraph
            line = 0
    return "".join(out).rstrip() + "\n"


class _Vocabulary:
    """Unigram and bigram counts of the docstring words, built once per source."""

    def __init__(self, docs: list[str]) -> None:
        self.tokens: list[str] = []
        self.follow: dict[str, list[str]] = {}
        for doc in docs:
            words = _words_of(doc)
            self.tokens.extend(words)
            for a, b in zip(words, words[1:], strict=False):
                self.follow.setdefault(a, []).append(b)


_CACHE: list[tuple[list[str], _Vocabulary]] = []  # the last docstring list and its counts


def _vocabulary(src: _Source) -> _Vocabulary:
    docs = src.docstrings()  # the same list object for the life of a source
    if not _CACHE or _CACHE[0][0] is not docs:
        _CACHE[:] = [(docs, _Vocabulary(docs))]
    return _CACHE[0][1]


def _count_for(rng: random.Random) -> int:
    return max(40, _length(rng) // 6)  # about 6 characters per word with its space


def salad_unigram(src: _Source) -> tuple[str, str]:
    rng = src.rng
    vocab = _vocabulary(src)
    words = [rng.choice(vocab.tokens) for _ in range(_count_for(rng))]
    return punctuate(words, rng), f"{len(words)} words drawn by frequency"


def salad_shuffled(src: _Source) -> tuple[str, str]:
    rng = src.rng
    count = _count_for(rng)
    words: list[str] = []
    while len(words) < count:
        words.extend(_words_of(src.prose(count * 7)))
    words = words[:count]
    rng.shuffle(words)
    return punctuate(words, rng), f"{len(words)} docstring words shuffled"


def salad_bigram(src: _Source) -> tuple[str, str]:
    rng = src.rng
    vocab = _vocabulary(src)
    word = rng.choice(vocab.tokens)
    words = [word]
    for _ in range(_count_for(rng) - 1):
        nxt = vocab.follow.get(word)
        word = rng.choice(nxt) if nxt else rng.choice(vocab.tokens)
        words.append(word)
    return punctuate(words, rng), f"{len(words)} words from a word-pair chain"


SALAD_KINDS: dict[str, Callable[[_Source], tuple[str, str]]] = {
    "salad_unigram": salad_unigram,
    "salad_shuffled": salad_shuffled,
    "salad_bigram": salad_bigram,
}
