"""What a paste becomes in the prompt: line ends normalised, terminal escapes and
control bytes removed (and said so), binary refused, long pastes folded into a chip.

Pure functions, so the prompt widget only decides where the text goes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CHIP_MIN_LINES = 11
"""Pastes of this many lines or more show as a chip (``[pasted 50 lines #1]``):
ten lines still fit the prompt's twelve rows with the typed question above them."""
BINARY_FRACTION = 0.10
"""A paste whose control bytes (NUL aside) pass this share of its characters is
refused as binary: a log with colour codes has well under 2 %, a file read as text
from a PNG or an ELF over 20 %."""

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
"""CSI sequences (colours, cursor moves), OSC strings (titles, links), and the
two-byte escapes: what a coloured traceback copied from a terminal carries."""
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
"""Control bytes a prompt cannot show; tab and newline stay (``\\r`` is a line end
and is normalised before this runs)."""
CHIP = re.compile(r"\[pasted (\d+) lines #(\d+)\]")
"""A folded paste in the prompt's text; group 2 is its number."""


class PasteRefused(ValueError):
    """The paste is binary data; the message says why, and nothing was inserted."""


@dataclass(frozen=True)
class CleanPaste:
    """A paste ready to insert."""

    text: str
    """The text, ``\\n`` line ends, no control bytes."""
    removed: int
    """Characters removed (escape sequences count their whole length)."""

    @property
    def lines(self) -> int:
        return line_count(self.text)

    @property
    def note(self) -> str | None:
        """What to tell the user about the cleaning; None when nothing was removed."""
        if not self.removed:
            return None
        return (
            f"the paste had {self.removed} terminal escape or control characters; they "
            "were removed, the rest was inserted"
        )


def clean_paste(raw: str) -> CleanPaste:
    """Normalise a paste; raise :class:`PasteRefused` when it is binary.

    Terminals send pasted line ends as ``\\r`` (tmux, most emulators) or
    ``\\r\\n``; both become ``\\n``, so a traceback arrives as it was copied.
    """
    text = raw.replace("\r\n", "\n").replace("\r", "\n")
    nul = text.count("\0")
    if nul:
        raise PasteRefused(
            f"the paste has {nul} NUL bytes, so it looks like binary data: "
            "it was not inserted (attach files with @path instead)"
        )
    stripped = _ANSI.sub("", text)
    controls = len(_CONTROL.findall(stripped))
    if text and controls / len(text) > BINARY_FRACTION:
        raise PasteRefused(
            f"{controls} of the paste's {len(text)} characters are control "
            "bytes, so it looks like binary data: it was not inserted"
        )
    cleaned = _CONTROL.sub("", stripped)
    return CleanPaste(cleaned, len(text) - len(cleaned))


def line_count(text: str) -> int:
    """Lines as a reader counts them (a final line break starts no new line)."""
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def chip_label(lines: int, number: int) -> str:
    """How a folded paste shows in the prompt."""
    return f"[pasted {lines} lines #{number}]"


def expand_chips(text: str, pastes: dict[int, str]) -> str:
    """``text`` with every known chip replaced by its paste (unknown ones stay)."""

    def whole(match: re.Match[str]) -> str:
        return pastes.get(int(match.group(2)), match.group(0))

    return CHIP.sub(whole, text)
