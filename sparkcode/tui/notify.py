"""Calling the user back: the terminal bell and desktop notifications (OSC 9, OSC 777)
when a turn ends or an approval waits while the terminal is not focused.

A local model's turn takes minutes, so the user is often in another window. The
terminal reports focus (Textual's ``AppBlur``/``AppFocus``); only while it is
blurred does anything ring. OSC 9 is what iTerm2, Windows Terminal, kitty,
WezTerm and foot show; OSC 777 (``notify;title;body``) is what VTE terminals
(GNOME Terminal, Tilix) and urxvt show; a terminal ignores the one it does
not know. Under tmux they reach the outer terminal only with
``set -g allow-passthrough on``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from sparkcode.config import NotifyMode

TITLE = "sparkcode"
BODY_CHARS = 160
"""A notification's text is cut to this many characters (a banner shows ~2 lines)."""
_UNSAFE = re.compile(r"[\x00-\x1f\x7f;]")
"""Control bytes would end the escape sequence early; ``;`` separates OSC 777's fields."""


def notification_sequences(mode: NotifyMode, body: str) -> str:
    """What to write to the terminal for ``body`` under ``mode`` ("" for off)."""
    text = _UNSAFE.sub(" ", body).strip()[:BODY_CHARS]
    out = ""
    if mode in ("bell", "both"):
        out += "\a"
    if mode in ("desktop", "both"):
        out += f"\x1b]9;{TITLE}: {text}\x07\x1b]777;notify;{TITLE};{text}\x07"
    return out


class Notifier:
    """Rings for the app, only while the terminal does not have the focus."""

    def __init__(
        self, mode: NotifyMode, write: Callable[[str], None], focused: Callable[[], bool]
    ) -> None:
        self.mode = mode
        """The ``[tui] notify`` setting."""
        self._write = write
        self._focused = focused
        self.sent = 0
        """Notifications written so far."""

    def attention(self, body: str) -> bool:
        """Notify about ``body`` if the terminal is not focused; True when it did."""
        if self.mode == "off" or self._focused():
            return False
        sequences = notification_sequences(self.mode, body)
        self._write(sequences)
        self.sent += 1
        return True
