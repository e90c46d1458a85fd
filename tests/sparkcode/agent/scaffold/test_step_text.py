"""Small-model mode's streamed text: a JSON step split anywhere into deltas shows
exactly its ``answer`` string, and a tool step shows nothing."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkcode.agent.scaffold.step_text import StepText, shown_text
from sparkcode.agent.tools import default_tools

FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@st.composite
def serialized(draw: st.DrawFn, obj: dict[str, Any]) -> str:
    """``obj`` as a server might stream it: escaped or not, with or without whitespace."""
    ensure_ascii = draw(st.booleans())
    indent = draw(st.sampled_from([None, 0, 2]))
    separators = draw(st.sampled_from([None, (",", ":"), (" , ", " : ")]))
    text = json.dumps(obj, ensure_ascii=ensure_ascii, indent=indent, separators=separators)
    return draw(st.sampled_from(["", " ", "\n"])) + text + draw(st.sampled_from(["", "\n"]))


@st.composite
def split(draw: st.DrawFn, text: str) -> list[str]:
    """``text`` cut at arbitrary points (inside escapes too)."""
    cuts = sorted(draw(st.sets(st.integers(0, len(text)), max_size=12)))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def stream(pieces: list[str]) -> tuple[str, StepText]:
    reader = StepText()
    text = "".join(reader.feed(p) for p in pieces)
    return text + reader.finish(), reader


answer_steps = st.text().map(lambda answer: {"answer": answer})
tool_steps = st.builds(
    lambda name, args, tool_first: (
        {"tool": name, "arguments": args} if tool_first else {"arguments": args, "tool": name}
    ),
    st.sampled_from(default_tools().names) | st.text(),
    st.dictionaries(st.text(), json_values, max_size=4),
    st.booleans(),
)


@FUZZ
@given(st.data())
def test_an_answer_step_split_anywhere_shows_exactly_its_answer(data: st.DataObject) -> None:
    step = data.draw(serialized(data.draw(answer_steps)))
    pieces = data.draw(split(step))
    text, reader = stream(pieces)
    assert text == json.loads(step)["answer"]
    assert reader.is_answer and reader.shown == text


@FUZZ
@given(st.data())
def test_a_cut_answer_step_shows_a_prefix_of_its_answer(data: st.DataObject) -> None:
    # Cut by max_tokens or a stopped stream: never a half-decoded escape.
    step = data.draw(serialized(data.draw(answer_steps)))
    end = data.draw(st.integers(0, len(step)))
    text, _ = stream(data.draw(split(step[:end])))
    assert json.loads(step)["answer"].startswith(text)


@FUZZ
@given(st.data())
def test_a_tool_step_split_anywhere_shows_nothing(data: st.DataObject) -> None:
    step = data.draw(serialized(data.draw(tool_steps)))
    text, reader = stream(data.draw(split(step)))
    assert text == "" and not reader.is_answer


@FUZZ
@given(st.data())
def test_text_that_is_not_a_json_object_passes_through(data: st.DataObject) -> None:
    # Whitespace alone is held as the lead of a step that may follow, and a stream cut
    # there shows nothing (test_a_cut_answer_step_shows_a_prefix_of_its_answer: " " of
    # ' {"answer": ""}'), so a reply of whitespace only shows nothing either.
    raw = data.draw(st.text().filter(lambda t: t.strip() != "" and not t.lstrip().startswith("{")))
    text, _ = stream(data.draw(split(raw)))
    assert text == raw


def test_escapes_split_between_deltas_decode_as_json_does() -> None:
    step = '{"answer": "a\\nb \\"q\\" \\u00e9 \\ud83d\\ude00 lone \\ud83d!"}'
    expected = json.loads(step)["answer"]
    assert expected.endswith("lone \ud83d!") and "\U0001f600" in expected
    for cut in range(len(step) + 1):
        assert stream([step[:cut], step[cut:]])[0] == expected, cut
    # A key spelled with an escape is still the answer key.
    assert stream(['{"\\u0061nswer":"hi"}'])[0] == "hi"


def test_a_json_reply_that_is_not_a_step_is_shown_once_it_ends() -> None:
    # A server that did not hold the model to the schema: the turn must not look empty.
    not_a_step = '{"tool": "read_file", "args": {"path": "a"}}'
    reader = StepText()
    assert reader.feed(not_a_step[:10]) == reader.feed(not_a_step[10:]) == ""
    assert reader.finish() == not_a_step
    assert stream(['{"tool" oops'])[0] == '{"tool" oops'
    # A step cut short shows nothing more: the turn says why it ended.
    assert stream(['{"tool": "read_file", "arguments": {"pa'])[0] == ""
    assert stream(['{"answer": "half', "-written"])[0] == "half-written"


def test_a_transcript_shows_a_step_as_what_it_stands_for() -> None:
    assert shown_text('{"answer": "done\\n"}') == "done\n"
    assert shown_text('{"tool": "read_file", "arguments": {"path": "a"}}') == ""
    assert shown_text("plain text") == "plain text"
    assert shown_text('{"answer": "cut') == '{"answer": "cut'
