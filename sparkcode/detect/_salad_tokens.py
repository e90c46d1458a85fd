"""Word classes for the ``word_salad`` check: English function words and word shapes.

Prose has grammar even when its topic is unknown: ``the`` is followed by a
noun or an adjective, hardly ever by ``of`` or ``is``; a sentence rarely ends on
``the``; ``-ly`` words sit before verbs and adjectives. Closed-class (function)
words carry that grammar and are the same in every domain, so each one is its
own class; every other word is reduced to its shape (suffix, capitals), which
keeps the class table small and the check independent of the vocabulary.

:func:`classify` maps one finished :class:`~._words.Word` to its class, the
punctuation class of the gap before it (``","`` or ``"."``) and whether that
gap breaks the run of prose (blank line, indented or bulleted line, aligned
columns); to ``None`` when the word is not prose (code, paths, identifiers,
numbers, other scripts) or to :data:`SKIP` for the ``t`` of ``don't``. The
same function tokenizes the training text of ``bench/codegen/salad_table.py`` and the
stream, so the two always agree.
"""

from __future__ import annotations

from ._words import Word

FUNCTION_WORDS: tuple[str, ...] = (
    # articles, determiners, quantifiers
    "the",
    "a",
    "an",
    "this",
    "that",
    "these",
    "those",
    "each",
    "every",
    "some",
    "any",
    "no",
    "all",
    "both",
    "either",
    "neither",
    "another",
    "such",
    "what",
    "which",
    "whose",
    "many",
    "much",
    "more",
    "most",
    "few",
    "less",
    "least",
    "other",
    "same",
    "own",
    "several",
    "enough",
    # pronouns
    "i",
    "you",
    "he",
    "she",
    "it",
    "we",
    "they",
    "me",
    "him",
    "her",
    "us",
    "them",
    "my",
    "your",
    "his",
    "its",
    "our",
    "their",
    "itself",
    "themselves",
    "one",
    "who",
    "whom",
    "something",
    "anything",
    "nothing",
    "everything",
    "there",
    # prepositions
    "of",
    "in",
    "to",
    "for",
    "with",
    "on",
    "at",
    "by",
    "from",
    "into",
    "over",
    "under",
    "about",
    "after",
    "before",
    "between",
    "through",
    "during",
    "without",
    "within",
    "against",
    "among",
    "upon",
    "across",
    "along",
    "around",
    "behind",
    "beyond",
    "below",
    "above",
    "like",
    "than",
    "via",
    "per",
    "since",
    "until",
    "towards",
    "toward",
    "off",
    "out",
    "up",
    "down",
    # conjunctions and clause openers
    "and",
    "or",
    "but",
    "nor",
    "so",
    "yet",
    "if",
    "then",
    "else",
    "because",
    "although",
    "though",
    "while",
    "whereas",
    "unless",
    "whether",
    "when",
    "where",
    "how",
    "why",
    "as",
    "once",
    # auxiliaries and modals
    "is",
    "are",
    "was",
    "were",
    "be",
    "been",
    "being",
    "am",
    "have",
    "has",
    "had",
    "do",
    "does",
    "did",
    "can",
    "could",
    "will",
    "would",
    "shall",
    "should",
    "may",
    "might",
    "must",
    # adverbs and particles
    "not",
    "also",
    "only",
    "just",
    "very",
    "too",
    "even",
    "still",
    "already",
    "often",
    "always",
    "never",
    "here",
    "now",
    "again",
    "however",
    "thus",
    "therefore",
    "instead",
    "rather",
    "otherwise",
    "well",
    "usually",
)

# Suffix shapes of content words, longest first within each class; the first match wins.
SHAPES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("~ing", ("ing",)),
    ("~ed", ("ed",)),
    ("~ly", ("ly",)),
    ("~noun", ("tion", "sion", "ment", "ness", "ity", "ance", "ence", "ship", "ism")),
    ("~adj", ("able", "ible", "ive", "ous", "ful", "less", "ic", "al", "ary", "ent", "ant")),
    ("~er", ("er", "or")),
    ("~s", ("s",)),
)
CAPITAL, ACRONYM, SHORT, WORD = "~Cap", "~CAPS", "~short", "~word"
COMMA, STOP = ",", "."
CLASSES: tuple[str, ...] = (
    FUNCTION_WORDS
    + tuple(name for name, _ in SHAPES)
    + (CAPITAL, ACRONYM, SHORT, WORD, COMMA, STOP)
)
"""Every class, in table order."""
INDEX: dict[str, int] = {name: i for i, name in enumerate(CLASSES)}
CONTENT: frozenset[int] = frozenset(
    INDEX[name] for name in [n for n, _ in SHAPES] + [CAPITAL, ACRONYM, WORD]
)
"""Classes of content words (the ones that name the topic)."""

_FUNCTION = frozenset(FUNCTION_WORDS)
# What may touch a prose word. Anything else (``foo(``, ``a.b``, ``x_y``,
# ``--flag``, ``a/b``, ``<tag>``, backquoted code) marks it as code or data.
_BEFORE = frozenset(" \n\t(\"'“‘*-") | {""}
_AFTER = frozenset(" \n\t)\"'”’*,.;:!?-") | {""}
# Characters a gap between two prose words may hold.
_GAP_CHARS = frozenset(" \n\t()\"'“”‘’*,.;:!?-–—")
_STOPS = frozenset(".!?")
_COMMAS = frozenset(",;:")
# The tails of contractions (``don't``, ``it's``, ``we'll``): skipped, not tokens.
_CLITICS = frozenset({"s", "t", "ll", "re", "ve", "d", "m"})

_CACHE_LIMIT = 4096  # distinct words or gaps memoised; cleared when full

NOT_PROSE = None
"""What :func:`classify` returns for code, data and other non-prose words."""
SKIP: tuple[bool, int, int] = (False, -1, -1)
"""What :func:`classify` returns for a word that is neither prose nor a break."""


def word_class(text: str, sentence_start: bool) -> str | None:
    """The class of one prose word, or ``None`` when the word is not prose-like.

    Numbers are not prose: item counts, versions and list numbers follow
    patterns of their own (``step 3 moves item 21``) that say nothing about
    the order of words.
    """
    if not text.isalpha() or not text.isascii():
        return None  # numbers, digits or underscores glued to letters, other scripts
    lower = text.lower()
    if text[0].isupper():
        if lower in _FUNCTION and (text[1:].islower() or text.isupper()):
            return lower  # "The", "THE" (headings, legal text), "I"
        if len(text) > 1 and text.isupper():
            # HTTP, API, JSON; longer ones are constants (MAX_SIZE) or shouted
            # text (licence disclaimers), whose word order the table does not know.
            return ACRONYM if len(text) <= 4 else None
        if not text[1:].islower():
            return None  # camelCase or CamelCase identifiers
        if not sentence_start:
            return CAPITAL
    elif not text.islower():
        return None  # camelCase
    if lower in _FUNCTION:
        return lower
    if len(lower) <= 3:
        return SHORT
    for name, suffixes in SHAPES:
        if lower.endswith(suffixes):
            return name
    return WORD


def _breaks(gap: str) -> bool:
    """Whether the gap ends one run of prose and starts another.

    A blank line, an indented or bulleted line, an alignment run of spaces
    inside a line, or a spaced dash (``name -- text``) separates table cells,
    list items and headings, whose neighbours are not one sentence.
    """
    if "\n" in gap:
        tail = gap[gap.rindex("\n") + 1 :]
        return gap.count("\n") > 1 or tail.startswith(("  ", "\t", "-", "*"))
    core = gap.strip(".,;:!?)\"'”’")
    return "  " in core or " -" in gap


def gap_info(gap: str) -> tuple[bool, int] | None:
    """``(breaks, punctuation class or -1)`` of a gap, ``None`` when it holds code punctuation."""
    if not _GAP_CHARS.issuperset(gap):
        return None
    if not _STOPS.isdisjoint(gap):
        return _breaks(gap), INDEX[STOP]
    if not _COMMAS.isdisjoint(gap):
        return _breaks(gap), INDEX[COMMA]
    return _breaks(gap), -1


_GAPS: dict[str, tuple[bool, int] | None] = {}
_WORDS: dict[tuple[str, bool], int] = {}


def classify(word: Word, sentence_start: bool) -> tuple[bool, int, int] | None:
    """``(breaks, punctuation, class)`` of ``word``; ``None`` when it is not prose.

    ``breaks`` says the gap before the word ends the previous run of prose (no
    transition into this word is judged); ``punctuation`` is the class index
    of the gap's ``","`` or ``"."`` (-1 for none); ``class`` is the word's
    class index. :data:`SKIP` (class -1) for a word that is no token (the
    ``t`` of ``don't``). ``sentence_start`` says whether the previous token
    ended a sentence, so a capital there is not read as a proper noun.
    """
    if word.length > 24:
        return NOT_PROSE
    if word.prev == "'" and word.text in _CLITICS:
        return SKIP
    if word.prev not in _BEFORE or word.next not in _AFTER:
        return NOT_PROSE
    gap = word.gap
    if gap == " ":
        breaks, punct = False, -1
    else:
        if gap not in _GAPS:
            if len(_GAPS) >= _CACHE_LIMIT:
                _GAPS.clear()
            _GAPS[gap] = gap_info(gap)
        info = _GAPS[gap]
        if info is None:
            return NOT_PROSE
        breaks, punct = info
    key = (word.text, sentence_start or breaks or punct == _STOP_INDEX)
    kind = _WORDS.get(key)
    if kind is None:
        if len(_WORDS) >= _CACHE_LIMIT:
            _WORDS.clear()
        name = word_class(*key)
        kind = _WORDS[key] = -1 if name is None else INDEX[name]
    if kind < 0:
        return NOT_PROSE
    return breaks, punct, kind


_STOP_INDEX = INDEX[STOP]
