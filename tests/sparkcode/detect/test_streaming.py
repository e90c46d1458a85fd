"""Streaming: any split of a text gives the whole-text verdict; state stays bounded."""

from __future__ import annotations

import random

import pytest

from sparkcode.detect import DegenerationDetector, DetectorConfig, Verdict, detect_text

LEAD = (
    "Here is the change you asked for. The function now reads the file once and "
    "returns the parsed rows.\n\n```python\ndef load(path):\n    with open(path) as fh:\n"
    "        return [line.split(',') for line in fh]\n```\n"
)

CASES = {
    "normal": LEAD * 1 + "That should be all.",
    "char_run": LEAD + "!" * 40,
    "subword": LEAD + "ization" * 9,
    "word": LEAD + "implementation " * 9,
    "phrase": "Ok. " + "I need to check the file again " * 13,
    "block": LEAD
    + (
        "Let me re-read the whole module to be sure nothing else calls "
        "this helper before I change it.\n"
    )
    * 6,
    "symbols": LEAD + "@#$%^&*()<>?{}[]|~" * 3,
    "odd": LEAD + "".join(f"q{i}\ufffd\u200b" for i in range(6)),
    "mixed": "```python\ndef calcулate(itемs):\n    return sum(itемs)\n```\n",
    "churn": LEAD + "value 的 при config 数据 ость parse 在 ных return 函数 ения token " * 2,
    "fence_split": "```py" + "thon\nx = get数据()\ny = read计算()\n``" + "`\n",
    "long_word": LEAD + "".join(random.Random(3).choices("abcdefghijklmnop", k=300)) + " done",
    "word_at_end": LEAD + "again, " * 7 + "again",
    "word_salad": LEAD
    + " ".join(
        random.Random(5).choices(
            "the of value returns a file is object to and default string in list name data "
            "for error method that with instance".split(),
            k=120,
        )
    )
    + ".",
}


def key(verdict: Verdict) -> tuple[object, ...]:
    return (verdict.degenerate, verdict.pattern, verdict.position, verdict.start, verdict.detail)


def stream(text: str, sizes: list[int]) -> Verdict:
    detector = DegenerationDetector()
    i = 0
    k = 0
    while i < len(text):
        size = sizes[k % len(sizes)]
        detector.feed(text[i : i + size])
        i += size
        k += 1
    return detector.finish()


@pytest.mark.parametrize("name", sorted(CASES))
def test_tiny_deltas_match_whole_text(name: str) -> None:
    text = CASES[name]
    whole = detect_text(text)
    assert whole.degenerate == (name not in ("normal", "long_word"))
    rng = random.Random(name)
    for sizes in ([1], [2], [3], [7], [rng.randint(1, 9) for _ in range(50)]):
        assert key(stream(text, sizes)) == key(whole), sizes


def test_fires_once_then_stays() -> None:
    detector = DegenerationDetector()
    assert detector.feed("fine text ") is None
    first = detector.feed("x" * 40)
    assert first is not None and first.pattern == "char_run"
    assert detector.feed("y" * 40) is None
    assert detector.verdict == first
    assert detector.chars_seen == 90
    assert detector.finish() == first


def test_reset_forgets_everything() -> None:
    detector = DegenerationDetector()
    detector.feed("x" * 31)
    detector.reset()
    assert detector.feed("x" * 31) is None  # the old run does not carry over
    assert detector.verdict.pattern == "none"
    assert detector.chars_seen == 31
    detector.feed("x")
    assert detector.verdict.pattern == "char_run"


def test_empty_and_clean_verdicts() -> None:
    detector = DegenerationDetector()
    assert detector.feed("") is None
    verdict = detector.finish()
    assert not verdict.degenerate and verdict.pattern == "none" and verdict.position is None
    assert verdict.to_json()["pattern"] == "none"
    assert verdict.describe() == "ok: no degeneration in 0 characters"


def test_describe_names_pattern_and_span() -> None:
    verdict = detect_text("ok " + "!" * 40)
    expected = "degenerate: char_run at chars 3-35: '!' repeated 32 times in a row"
    assert verdict.describe() == expected
    assert verdict.describe(" (line 1)").startswith("degenerate: char_run at chars 3-35 (line 1): ")


def _normal_megabyte(rng: random.Random, size: int) -> str:
    """Non-repeating code-and-prose-like text: random words, numbers, punctuation."""
    vocab = (
        "the parser value config return self items path open read write list dict "
        "error token stream file line index count result data node tree key"
    ).split()
    out: list[str] = []
    total = 0
    while total < size:
        words = [
            rng.choice(vocab) + (str(rng.randint(0, 999)) if rng.random() < 0.3 else "")
            for _ in range(rng.randint(3, 12))
        ]
        line = "    " * rng.randint(0, 3) + " ".join(words) + rng.choice([".", ":", ",", ""]) + "\n"
        out.append(line)
        total += len(line)
    return "".join(out)


def test_state_is_bounded_over_a_megabyte() -> None:
    text = _normal_megabyte(random.Random(1), 1_000_000)
    detector = DegenerationDetector()
    sizes: list[int] = []
    for i in range(0, len(text), 997):
        detector.feed(text[i : i + 997])
        if i in (0, 99_704, 498_520) or i + 997 >= len(text):
            sizes.append(detector.state_size())
    assert detector.verdict.pattern == "none", detector.verdict
    assert detector.chars_seen == len(text)
    assert max(sizes) <= 2000  # a few windows' worth, whatever the length
    assert sizes[-1] <= max(sizes[:2]) * 2  # no growth between 100 KB and 1 MB


ENDLESS = {
    "char_run": "a" * 200_000,
    "unit_loop": "ab" * 100_000,
    "word_loop": "word " * 20_000,
    "salad": "q" + "".join(chr(0x4E00 + i % 500) + chr(0x430 + i % 30) for i in range(100_000)),
    "word_salad": " ".join(
        random.Random(2).choices(
            "the of value returns a file is object to and default string in list name data "
            "for error method that with instance parser option module".split(),
            k=40_000,
        )
    ),
}


@pytest.mark.parametrize("name", sorted(ENDLESS))
def test_state_is_bounded_on_endless_degenerate_input(name: str) -> None:
    text = ENDLESS[name]
    # Thresholds out of reach, so every check keeps working on the whole input.
    never = 10**9
    cfg = DetectorConfig(
        char_run=never,
        structural_char_run=never,
        subword_repeats=never,
        data_unit_repeats=never,
        phrase_repeats=never,
        block_repeats=never,
        block_any_repeats=never,
        symbol_run=never,
        odd_chars=never,
        mixed_script_words=never,
        churn_switches=never,
        salad_threshold=-never,
        salad_drift_threshold=-never,
    )
    detector = DegenerationDetector(cfg)
    sizes = []
    for i in range(0, len(text), 4096):
        detector.feed(text[i : i + 4096])
        sizes.append(detector.state_size())
    assert detector.verdict.pattern == "none"
    assert max(sizes) <= 2000
    assert sizes[-1] <= max(sizes[:10]) + 64


def test_pending_word_is_clipped() -> None:
    detector = DegenerationDetector()
    for _ in range(10_000):
        detector.feed("abcdefghijklmnopqrstuvwxyz"[: 1 + _ % 26])
    assert detector.state_size() <= 2000
