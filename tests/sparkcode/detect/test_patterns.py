"""Each pattern fires at its threshold and not one below."""

from __future__ import annotations

import pytest

from sparkcode.detect import DegenerationDetector, DetectorConfig, detect_text

PROSE = (
    "The parser reads one line at a time and hands each complete statement to the "
    "compiler, which keeps a table of the names it has seen so far"
)


def varied_prose(sentences: int) -> str:
    """Normal text with no repeated block: every sentence differs."""
    return "".join(
        f"Step {i} moves item {i * 7} to shelf {i % 5} of the store. " for i in range(sentences)
    )


def pattern_of(text: str) -> str:
    return detect_text(text).pattern


# ---------------------------------------------------------------- char_run


def test_char_run_fires_at_32_not_31() -> None:
    assert pattern_of(PROSE + "x" * 31 + " end") == "none"
    verdict = detect_text(PROSE + "x" * 32 + " end")
    assert verdict.pattern == "char_run"
    assert verdict.start == len(PROSE)
    assert verdict.position == len(PROSE) + 32


@pytest.mark.parametrize("char", ["!", "0", "的", "\n", "?"])
def test_char_run_any_plain_character(char: str) -> None:
    assert pattern_of(PROSE + char * 31 + "z") == "none"
    assert pattern_of(PROSE + char * 32 + "z") == "char_run"


@pytest.mark.parametrize("char", ["-", "=", "#", "*", " ", "."])
def test_structural_runs_use_the_longer_limit(char: str) -> None:
    limit = DetectorConfig().structural_char_run
    assert pattern_of(f"# {char * 78}\nx = 1\n") == "none"  # a separator line is normal code
    assert pattern_of(PROSE + char * (limit - 1) + "z") == "none"
    assert pattern_of(PROSE + char * limit + "z") == "char_run"


# ---------------------------------------------------------------- subword_repeat


@pytest.mark.parametrize(
    "unit",
    [
        "ab",
        "the ",
        "ung",
        "ization",
        "_get_value_x",
        "getValue",
        "DEAD",
        "EditorWindow_",
        "refreshCanvas_",
    ],
)
def test_subword_unit_fires_at_8_not_7(unit: str) -> None:
    assert len(unit) <= DetectorConfig().max_unit
    assert pattern_of(PROSE + unit * 7 + "!") == "none"
    verdict = detect_text(PROSE + unit * 8 + "!")
    assert verdict.pattern == "subword_repeat"
    assert verdict.extra["repeats"] == 8


def test_whole_word_longer_than_a_unit_fires_at_8_not_7() -> None:
    word = "implementation"  # 14 chars + separator: beyond the character units
    assert pattern_of(PROSE + " " + (word + ", ") * 7 + "done") == "none"
    verdict = detect_text(PROSE + " " + (word + ", ") * 8 + "done")
    assert verdict.pattern == "subword_repeat"
    assert verdict.extra["unit"] == word


@pytest.mark.parametrize(
    "unit", ["0, ", "\\x00", "--- | ", "\\ufffe", "ICAg", "IyMj", "Kioq", "00ff", "LS0t"]
)
def test_data_units_need_more_copies(unit: str) -> None:
    need = DetectorConfig().data_unit_repeats
    assert need > DetectorConfig().subword_repeats
    assert pattern_of(PROSE + " [" + unit * (need - 1) + "]") == "none"
    assert pattern_of(PROSE + " [" + unit * need + "]") == "subword_repeat"


def test_escaped_words_in_string_tables_are_data() -> None:
    table = "TABLE = (\n" + "    '\\ufffe'\n" * 12 + ")\n"
    assert pattern_of(table) == "none"


def test_data_like_literal_is_normal() -> None:
    code = "grid = [\n" + "    [0, 0, 0, 0, 0, 0, 0, 0, 0],\n" * 3 + "]\n"
    assert pattern_of(code) == "none"


# ---------------------------------------------------------------- phrase_loop


def test_phrase_loop_fires_at_12_copies_with_coverage() -> None:
    phrase = "let me check the file "
    assert pattern_of("Sure. " + phrase * 11) == "none"
    verdict = detect_text("Sure. " + phrase * 12)
    assert verdict.pattern == "phrase_loop"
    assert verdict.extra["repeats"] == 12


def test_phrase_loop_needs_60_percent_coverage() -> None:
    phrase = "we can do it now "  # 12 copies = 204 chars, short of the block-loop span
    body = varied_prose(20)
    loop = phrase * 12
    region = len(loop.rstrip())  # the evidence ends with the last word
    balance = region / 0.6 - region  # lead length at exactly 60% coverage
    # a lead ending at a word boundary just past / just short of that length
    lead_under = body[: body.index(" ", int(balance) + 1) + 1]
    lead_over = body[: body.rindex(" ", 0, int(balance)) + 1]
    assert pattern_of(lead_under + loop) == "none"
    assert pattern_of(lead_over + loop) == "phrase_loop"


# ---------------------------------------------------------------- block_loop


def test_block_loop_fires_at_5_copies_anywhere() -> None:
    sentence = (
        "I will now open the configuration file and read the settings for the "
        "parser before making any change to the code.\n"
    )  # > 96 chars
    assert len(sentence) * 5 >= DetectorConfig().block_min_chars
    lead = varied_prose(40)  # the loop covers far less than 60% of the text
    assert pattern_of(lead + sentence * 4 + "Done.") == "none"
    verdict = detect_text(lead + sentence * 5 + "Done.")
    assert verdict.pattern == "block_loop"
    assert verdict.start == len(lead)


def test_short_phrase_loop_far_into_the_text_fires_on_count() -> None:
    need = DetectorConfig().block_any_repeats
    lead = varied_prose(40)
    phrase = "on the spec sheet, "  # too short for the span rule, far too little coverage
    assert len(phrase) * need < DetectorConfig().block_min_chars
    assert pattern_of(lead + phrase * (need - 1) + "Done.") == "none"
    assert pattern_of(lead + phrase * need + "Done.") == "block_loop"


def test_repeated_code_lines_that_differ_are_normal() -> None:
    code = "".join(f"        self.field_{i} = kwargs.get('field_{i}', None)\n" for i in range(40))
    assert pattern_of(code) == "none"


# ---------------------------------------------------------------- symbol_run


def test_symbol_run_fires_at_threshold_not_below() -> None:
    soup = "@#$%^&*" * 10
    need = DetectorConfig().symbol_run
    assert pattern_of(PROSE + soup[: need - 1] + " a") == "none"
    verdict = detect_text(PROSE + soup[:need] + " a")
    assert verdict.pattern == "symbol_run"
    assert verdict.start == len(PROSE)


def test_dense_regex_is_normal() -> None:
    assert pattern_of('    r"((?:\\{[^}]+\\})?[^/\\[\\]\\(\\)@!=\\s]+)|"\n') == "none"
    assert pattern_of("PUNCTUATION_KEYS = tuple('~!@#%^&*()_-+={}[]|;:,.<>/?')\n") == "none"


def test_symbol_run_ignores_spaces_and_needs_variety() -> None:
    assert pattern_of(PROSE + " ".join("@#$%^&*" * 6)[:79] + " a") == "symbol_run"
    assert pattern_of(PROSE + "-=+*-" * 10 + " a") == "none"  # only 4 different symbols
    art = "+--------+     +--------+\n| <=>  {} | --> | [] ;;  |\n+--------+     +--------+\n"
    assert pattern_of(PROSE + "\n" + art * 3) == "none"  # a diagram spreads over lines


# ---------------------------------------------------------------- odd_chars


def test_odd_chars_fire_at_8_in_the_window_not_7() -> None:
    def garbled(count: int) -> str:
        return "".join(f"w{i}\ufffd" for i in range(count))

    assert pattern_of(PROSE + garbled(7) + "end") == "none"
    assert pattern_of(PROSE + garbled(8) + "end") == "odd_chars"
    text = varied_prose(20)
    spread = "".join("\x00" + text[i : i + 70] for i in range(0, 700, 70))  # 1 per 71 chars
    assert pattern_of(PROSE + spread) == "none"


# ---------------------------------------------------------------- mixed_script


def test_mixed_script_identifiers_fire_at_two() -> None:
    one = "def calcулate_total(items):\n    return sum(items)\n"
    two = "def calcулate_total(items):\n    return sum(itемs)\n"
    assert pattern_of(one) == "none"
    assert pattern_of(two) == "mixed_script"


def test_cjk_inside_code_fence_fires() -> None:
    code = "```python\ndef load计算(path):\n    return read数据(path)\n```\n"
    assert pattern_of(code) == "mixed_script"


def test_normal_multilingual_text_is_fine() -> None:
    assert pattern_of("使用Python编写脚本，然后调用Python函数处理数据。" * 3) == "none"
    assert pattern_of("The step is Δx and the delay is 10μs; Δy follows.") == "none"
    assert pattern_of("Пример: функция print выводит текст на экран.") == "none"


# ---------------------------------------------------------------- script_churn


def test_token_salad_fires() -> None:
    salad = "value 的 при config 数据 ость parse 在 ных return 函数 ения token 中 ский " * 2
    assert pattern_of(salad) == "script_churn"


def test_two_scripts_alternating_is_not_churn() -> None:
    text = "用 Python 写 code 的 时候 要 注意 indent 和 style " * 3
    assert pattern_of(text) == "none"


# ---------------------------------------------------------------- logprob_collapse


def _feed_logprobs(values: list[float]) -> DegenerationDetector:
    detector = DegenerationDetector()
    for i, lp in enumerate(values):
        detector.feed(f"w{i} ", [lp])
    return detector


def test_logprob_collapse_fires() -> None:
    cfg = DetectorConfig()
    detector = _feed_logprobs([-0.3] * 64 + [-5.0] * cfg.logprob_window)
    assert detector.verdict.pattern == "logprob_collapse"
    assert detector.verdict.degenerate


def test_logprob_small_drop_or_short_baseline_does_not_fire() -> None:
    assert _feed_logprobs([-0.3] * 64 + [-2.0] * 32).verdict.pattern == "none"
    assert _feed_logprobs([-0.3] * 10 + [-6.0] * 16).verdict.pattern == "none"


def test_a_few_unlikely_tokens_are_not_a_collapse() -> None:
    values = [-0.2] * 64 + [-8.0] * 4 + [-0.2] * 12 + [-8.0] * 3 + [-0.2] * 30
    assert _feed_logprobs(values).verdict.pattern == "none"


def test_logprobs_several_per_delta_and_infinities() -> None:
    detector = DegenerationDetector()
    detector.feed(varied_prose(5), [-0.1] * 50)
    assert detector.verdict.pattern == "none"
    fired = detector.feed("garbage", [float("-inf")] * 16)
    assert fired is not None and fired.pattern == "logprob_collapse"
    assert fired.position == detector.chars_seen


# ---------------------------------------------------------------- normal text


@pytest.mark.parametrize(
    "text",
    [
        "x = 1\n" * 3,
        "| a | b |\n|---|---|\n| 1 | 2 |\n" * 4,
        "        self.a = a\n        self.b = b\n        self.c = c\n",
        "data = b'" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo=" * 3 + "'\n",
        'blob = (\n    "' + "ICAg" * 16 + '"\n    "' + "ICAg" * 16 + '"\n)\n',  # base64 of spaces
        "    " * 8 + "return value\n",
    ],
)
def test_normal_snippets(text: str) -> None:
    assert pattern_of(text) == "none"
