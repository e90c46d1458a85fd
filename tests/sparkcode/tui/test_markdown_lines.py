"""Streamed answer and thinking: cached lines, repaints without layouts, re-wraps on resize."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console
from rich.markdown import Markdown as RichMarkdown
from textual.app import App, ComposeResult
from textual.widgets.collapsible import CollapsibleTitle

from sparkcode.tui.widgets.chat import AssistantMessage, ThinkingBlock
from sparkcode.tui.widgets.markdown_lines import CODE_THEME, render_markdown

SAMPLE = (
    "# Title\n\nSome *emphasis*, **bold**, `code`, ~~struck~~ and a [link](https://x.y).\n\n"
    "- one\n- two\n\n1. first\n2. second\n\n> quoted\n\n"
    "| a | b |\n|---|---|\n| 1 | 2 |\n\n```python\ndef f(x):\n    return x\n```\n\n---\n"
)


def test_shared_parser_renders_like_rich() -> None:
    console = Console(width=70, color_system="truecolor", force_terminal=True)
    ours = console.render_lines(render_markdown(SAMPLE), console.options)
    rich = console.render_lines(
        RichMarkdown(SAMPLE, code_theme=CODE_THEME, hyperlinks=False), console.options
    )
    assert ours == rich
    assert len(ours) > 10  # the sample really rendered (a table, a fence, lists)


class Host(App[None]):
    def compose(self) -> ComposeResult:
        yield AssistantMessage()


def _text(answer: AssistantMessage) -> list[str]:
    return [answer.render_line(y).text.rstrip() for y in range(answer.size.height)]


async def _stream(answer: AssistantMessage, text: str) -> None:
    answer.append_text(text)
    await answer.finish()


async def test_a_flush_that_keeps_the_height_repaints_without_a_layout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = Host()
    async with app.run_test(size=(40, 10)) as pilot:
        answer = app.query_one(AssistantMessage)
        await _stream(answer, "Hello")
        await pilot.pause()
        assert _text(answer) == ["Hello"]
        layouts: list[bool] = []
        refresh = answer.refresh

        def spy(*regions: Any, **kwargs: Any) -> AssistantMessage:
            layouts.append(bool(kwargs.get("layout")))
            return refresh(*regions, **kwargs)

        monkeypatch.setattr(answer, "refresh", spy)
        await _stream(answer, " world")
        await pilot.pause()
        assert _text(answer) == ["Hello world"]
        assert layouts and not any(layouts)  # repainted, not laid out

        await _stream(answer, ", and a sentence long enough to wrap onto a second line")
        await pilot.pause()
        assert any(layouts)
        assert answer.size.height == 2 and _text(answer)[1].endswith("second line")

        await _stream(answer, "\n\n## Next\n\nmore")
        await pilot.pause()
        assert answer.tail == "more"  # blocks end at blank lines; the last may still grow
        assert [line.strip() for line in _text(answer)[-4:]] == ["", "Next", "", "more"]
        assert answer.source == answer.text


async def test_the_answer_rewraps_when_the_terminal_narrows() -> None:
    words = " ".join(f"word{i}" for i in range(30))
    app = Host()
    async with app.run_test(size=(80, 30)) as pilot:
        answer = app.query_one(AssistantMessage)
        await _stream(answer, f"{words}\n\n{words}")
        await pilot.pause()
        wide = _text(answer)
        await pilot.resize_terminal(30, 30)
        await pilot.pause()
        narrow = _text(answer)
        assert len(narrow) > len(wide)
        assert all(len(line) <= answer.size.width for line in narrow)
        assert " ".join(narrow).split() == " ".join(wide).split()


async def test_a_theme_change_redraws_the_cached_lines() -> None:
    app = Host()
    async with app.run_test(size=(40, 10)) as pilot:
        app.theme = "textual-dark"
        answer = app.query_one(AssistantMessage)
        await _stream(answer, "plain text\n\nmore\n\n")
        await pilot.pause()
        before = answer.render_line(0)
        app.theme = "textual-light"
        await pilot.pause()
        after = answer.render_line(0)
        assert after.text == before.text and after != before


@pytest.mark.parametrize("cut", [1, 3, 7, 40, 10_000])
async def test_the_answer_renders_as_a_whole_however_the_stream_was_cut(cut: int) -> None:
    text = SAMPLE + "\n\nlast *words*"
    app = Host()
    async with app.run_test(size=(40, 60)) as pilot:
        answer = app.query_one(AssistantMessage)
        console = Console(width=answer.size.width, color_system=None)
        expected = [
            "".join(segment.text for segment in line).rstrip()
            for line in console.render_lines(render_markdown(text))
        ]
        for start in range(0, len(text), cut):
            await _stream(answer, text[start : start + cut])
        await pilot.pause()
        assert _text(answer) == expected


class ThinkingHost(App[None]):
    def compose(self) -> ComposeResult:
        yield ThinkingBlock(1536)


async def test_the_thinking_header_counts_without_laying_the_screen_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = ThinkingHost()
    async with app.run_test(size=(60, 20)) as pilot:
        block = app.query_one(ThinkingBlock)
        header = block.query_one(CollapsibleTitle)
        block.append_text("Let me think. ", tokens=10)
        await pilot.pause(0.3)
        assert "thinking: 10 / 1536 tokens" in header.render_line(0).text
        layouts: list[bool] = []
        refresh = header.refresh

        def spy(*regions: Any, **kwargs: Any) -> CollapsibleTitle:
            layouts.append(bool(kwargs.get("layout")))
            return refresh(*regions, **kwargs)

        monkeypatch.setattr(header, "refresh", spy)
        block.append_text("More. ", tokens=42)
        await pilot.pause(0.3)
        assert block.title == "thinking: 42 / 1536 tokens"
        assert "thinking: 42 / 1536 tokens" in header.render_line(0).text
        assert layouts and not any(layouts)  # same width: repainted only
        block.append_text("Much more. ", tokens=420)
        await pilot.pause(0.3)
        assert "thinking: 420 / 1536 tokens" in header.render_line(0).text
        assert any(layouts)  # one digit wider: laid out
        await block.finish(collapse=True)
        await pilot.pause()
        assert block.title == "thinking: 420 / 1536 tokens"
        assert header.render_line(0).text.strip().startswith("▶ thinking: 420 / 1536")
