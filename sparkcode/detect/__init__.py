"""Degeneration detector: spots looping or garbled model output while it streams.

Usage::

    detector = DegenerationDetector()
    for delta in stream:
        verdict = detector.feed(delta)            # or feed(delta, token_logprobs)
        if verdict is not None:                   # fires once, on first evidence
            offer_to_stop(verdict.pattern, verdict.detail, verdict.position)
    final = detector.finish()                     # also judges the last word

    detect_text(text) -> Verdict                  # the same on a whole text

A :class:`Verdict` names the ``pattern``, says what was seen in ``detail`` and
where: ``start`` (first character of the evidence) and ``position`` (just past
it), as character offsets into the text fed so far. The thresholds below were
set against ``bench/studies/detector_rates.py`` (normal stdlib code and prose versus
constructed garbage); each is a field of :class:`DetectorConfig`.

Patterns (names in :data:`PATTERNS`):

``char_run``
    One character 32 times in a row; 120 for alignment and separator
    characters (``-``, ``=``, ``#``, ``*``, space, ...) whose long runs are normal
    in code (``# ------`` lines, aligned comments, reST underlines).
``subword_repeat``
    A subword repeated 8 times back to back. With no tokenizer, a subword is
    any 2-16 character unit (``thethe``, ``the the``, ``ung ung``) or one whole
    word separated only by non-word characters. Units that look like data
    rather than word pieces need 24: no two adjacent letters (``0, ``,
    ``--- |``), an escape (``\\x00``), hex with digits (``00ff``), base64 of one
    repeated byte (``ICAg``).
``phrase_loop``
    A 2-8 word phrase repeated 12 times in a row, covering 60% of the text.
``block_loop``
    A 2-64 word block repeated 5 times in a row over at least 320 characters,
    or 16 times if it holds a real word, anywhere in the text (sentence and
    code-line loops after a long answer, where the 60% coverage never comes).
``symbol_run``
    32 symbols in a row on one line (spaces ignored), at least 6 different.
``odd_chars``
    8 control, format, private-use, unassigned or U+FFFD characters in 64.
``mixed_script``
    Two words within 2000 characters that glue writing systems together
    (``calcулate``; CJK inside a Latin identifier or inside a code fence).
``script_churn``
    Token salad: 8 script changes across 3 scripts within 24 words.
``word_salad``
    Real words in an order no grammar produces (a corrupted model state, far
    too hot sampling). Each prose word becomes a class (one of 171 English
    function words, or a content word's shape: ``-ing``, ``-ly``, capitalised,
    ...) and each transition is scored by its pointwise mutual information
    from a table learned on third-party docstrings (``bench/codegen/salad_table.py``).
    Over a window of 64 tokens (about 50 words), 80% of them prose, it fires
    when the mean falls below -0.3 nats (prose averages above 0), or below
    0.1 while at most 3 of the last 30 content words recur (word-pair chains
    that lose the topic). Code, identifiers, numbers, tables and lists are
    not prose and leave holes in the window.
``logprob_collapse``
    With logprobs: the mean of the last 16 tokens falls 2.5 nats below the
    running baseline and under -3.0.
"""

from ._config import PATTERNS, DetectorConfig, Verdict
from ._detector import DegenerationDetector, detect_text
from ._salad import prose_transitions
from ._salad_tokens import CLASSES as WORD_CLASSES

__all__ = [
    "PATTERNS",
    "WORD_CLASSES",
    "DegenerationDetector",
    "DetectorConfig",
    "Verdict",
    "detect_text",
    "prose_transitions",
]
