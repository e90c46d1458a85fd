"""``scripts/screenshot.py``, which makes the README's picture of the TUI, still runs and
still shows a turn in progress (its prompt, thinking, a tool call, the answer streaming,
tok/s); the committed ``docs/images/tui.svg`` shows the same."""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT

EXPECTED = (
    "test_calc.py fails. Run the tests, fix the bug in calc.py",  # the prompt
    "thinking: 31 / 1536 tokens",  # the thinking block
    "I should read calc.py before editing it",  # its text, expanded
    "read_file",  # the tool card
    "return a - b",  # its result
    "I will change it to return a + b",  # the answer, streaming
    "decode 23.0 tok/s",  # the status bar
    "Stop turn",  # the turn is running
)


def visible_text(svg: str) -> str:
    """The characters an SVG saved by Textual shows, in order."""
    return html.unescape("".join(re.findall(r">([^<]*)</text>", svg))).replace("\xa0", " ")


def test_the_script_saves_an_svg_of_a_turn_in_progress(tmp_path: Path) -> None:
    out = tmp_path / "tui.svg"
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "screenshot.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    svg = out.read_text(encoding="utf-8")
    assert svg.startswith("<svg")
    shown = visible_text(svg)
    missing = [text for text in EXPECTED if text not in shown]
    assert missing == [], f"the screenshot lacks {missing}:\n{shown}"


def test_the_committed_screenshot_shows_the_same_turn() -> None:
    shown = visible_text((ROOT / "docs" / "images" / "tui.svg").read_text(encoding="utf-8"))
    missing = [text for text in EXPECTED if text not in shown]
    assert missing == [], (
        f"docs/images/tui.svg lacks {missing}: rerun `.venv/bin/python scripts/screenshot.py`"
    )
