"""Character-level checks: character runs, repeated subword units, symbol runs.

Each check reads the stream one character at a time and keeps a fixed amount
of state (the last ``max_unit`` characters, a few counters, a bounded deque),
so its work per character is constant however long the text grows.
"""

from __future__ import annotations

import unicodedata
from collections import deque

from ._config import DetectorConfig, Verdict

_ODD_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cn", "Cs"})
_HEX = frozenset("0123456789abcdefABCDEF")
_BASE64 = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")


def _is_data_unit(unit: str) -> bool:
    """True for data or table syntax rather than a word piece.

    A looping *subword* is letters, mostly lower case (``ization``, ``the ``,
    ``getValue``). Data repeats legitimately: escapes (``\\x00``), numbers and
    table syntax with no two neighbouring letters (``0, ``, ``--- | ``; read
    cyclically, as the unit repeats), hex with digits (``00ff``) and base64 of
    one repeated byte, a 4-character unit mixing cases or letters and digits
    (``ICAg`` = spaces, ``IyMj`` = ``#``, ``LS0t`` = ``-``).
    """
    if "\\" in unit:
        return True
    n = len(unit)
    if not any(unit[i].isalpha() and unit[(i + 1) % n].isalpha() for i in range(n)):
        return True
    if all(c in _HEX for c in unit) and any(c.isdigit() for c in unit):
        return True
    if n == 4 and all(c in _BASE64 for c in unit):
        letters = [c for c in unit if c.isalpha()]
        mixed_case = any(c.isupper() for c in letters) and any(c.islower() for c in letters)
        return mixed_case or len(letters) < n
    return False


def _hit(pattern: str, detail: str, position: int, start: int, **extra: str | int) -> Verdict:
    return Verdict(
        True,
        pattern,
        detail,
        position=position,
        start=start,
        chars_seen=position,
        extra=dict(extra),
    )


class RepetitionCheck:
    """``char_run`` and ``subword_repeat`` over character units.

    A *subword*, with no tokenizer at hand, is any unit of ``min_unit`` to
    ``max_unit`` characters repeated back to back: ``thethethe``, ``the the
    the`` (unit ``"the "``), ``ungungung``. For every period ``p`` the check
    counts how many consecutive characters equal the one ``p`` earlier; ``k``
    back-to-back copies of a ``p``-character unit make that count reach
    ``(k - 1) * p``. Only the periods at which the current character occurred
    in the last ``max_unit`` characters are touched; the others reset lazily.
    """

    def __init__(self, config: DetectorConfig) -> None:
        self._cfg = config
        self._structural = frozenset(config.structural_chars)
        self._max = max(1, config.max_unit)
        self.reset()

    def reset(self) -> None:
        self._tail = ""
        self._pos = 0
        self._run_len = [0] * (self._max + 1)
        self._run_last = [-2] * (self._max + 1)
        # The smallest match count at which each period could fire.
        cfg = self._cfg
        self._floor = [0, min(cfg.char_run, cfg.structural_char_run) - 1] + [
            (cfg.subword_repeats - 1) * p for p in range(2, self._max + 1)
        ]

    def state_size(self) -> int:
        """Number of stored items (bounded by ``max_unit``)."""
        return len(self._tail) + len(self._run_len) + len(self._run_last)

    def feed(self, delta: str) -> Verdict | None:
        maxu = self._max
        s = self._tail + delta
        first = len(self._tail)
        base = self._pos - first  # absolute offset of s[0]
        run_len, run_last, floor = self._run_len, self._run_last, self._floor
        for k in range(first, len(s)):
            c = s[k]
            lo = k - maxu if k > maxu else 0
            j = s.find(c, lo, k)
            if j < 0:
                continue
            i = base + k
            while j >= 0:
                p = k - j
                if run_last[p] == i - 1:
                    n = run_len[p] = run_len[p] + 1
                else:
                    n = run_len[p] = 1
                run_last[p] = i
                if n >= floor[p]:  # rare: only inside long runs
                    verdict = self._judge(s, k, c, n, p, i)
                    if verdict is not None:
                        self._advance(s, len(s) - first)
                        return verdict
                j = s.find(c, j + 1, k)
        self._advance(s, len(delta))
        return None

    def _judge(self, s: str, k: int, c: str, n: int, p: int, i: int) -> Verdict | None:
        cfg = self._cfg
        if p == 1:
            limit = cfg.structural_char_run if c in self._structural else cfg.char_run
            if n + 1 >= limit:
                return _hit(
                    "char_run",
                    f"{c!r} repeated {n + 1} times in a row",
                    i + 1,
                    i - n,
                    unit=c,
                    repeats=n + 1,
                )
            return None
        if p < cfg.min_unit:
            return None
        return self._unit_hit(s[k - p + 1 : k + 1], n, p, i)

    def _unit_hit(self, unit: str, n: int, p: int, i: int) -> Verdict | None:
        for d in range(1, p // 2 + 1):
            if p % d == 0 and unit == unit[:d] * (p // d):
                return None  # a repeat of a shorter unit: that period decides
        if p > self._cfg.max_spaced_unit and any(c.isspace() for c in unit):
            return None  # a phrase: the word checks decide
        need = self._cfg.data_unit_repeats if _is_data_unit(unit) else self._cfg.subword_repeats
        if n < (need - 1) * p:
            return None
        reps = (n + p) // p
        return _hit(
            "subword_repeat",
            f"{unit!r} repeated {reps} times in a row",
            i + 1,
            i + 1 - n - p,
            unit=unit,
            repeats=reps,
        )

    def _advance(self, s: str, consumed: int) -> None:
        self._pos += consumed
        self._tail = s[-self._max :]


def is_odd_char(c: str) -> bool:
    """Controls (other than tab/newline/CR), format chars, private use, unassigned, U+FFFD."""
    if c < "\x80":
        return (c < " " and c not in "\t\n\r") or c == "\x7f"
    return c == "\ufffd" or unicodedata.category(c) in _ODD_CATEGORIES


class SymbolCheck:
    """``symbol_run`` and ``odd_chars``: sudden runs of symbols or unusual code points.

    A symbol is any character that is neither a letter, a digit nor whitespace.
    Spaces inside a run neither break it nor count (``@ # $ %`` is a run); a
    letter, a digit or a line break ends it, so ASCII-art diagrams and grammar
    tables, whose symbols spread over many lines, stay out. The run must also
    use several different symbols, which keeps separator lines out (one
    repeated character is ``char_run``'s).
    Odd characters are counted in a sliding window of the last characters.
    """

    def __init__(self, config: DetectorConfig) -> None:
        self._cfg = config
        self.reset()

    def reset(self) -> None:
        self._pos = 0
        self._run = 0
        self._run_start = 0
        self._distinct: set[str] = set()
        self._odd: deque[int] = deque()

    def state_size(self) -> int:
        """Number of stored items (bounded by the window and the distinct quota)."""
        return len(self._distinct) + len(self._odd)

    def feed(self, delta: str) -> Verdict | None:
        cfg = self._cfg
        odd = self._odd
        window = cfg.odd_window
        for k, c in enumerate(delta):
            i = self._pos + k
            if c.isalnum() or c == "\n":
                if self._run:
                    self._run = 0
                    self._distinct.clear()
                continue
            if c.isspace():
                continue
            if self._run == 0:
                self._run_start = i
            self._run += 1
            if len(self._distinct) < cfg.symbol_run_distinct:
                self._distinct.add(c)
            if self._run >= cfg.symbol_run and len(self._distinct) >= cfg.symbol_run_distinct:
                self._pos += len(delta)
                return _hit(
                    "symbol_run",
                    f"{self._run} symbols in a row with no letter or digit",
                    i + 1,
                    self._run_start,
                    length=self._run,
                )
            if is_odd_char(c):
                odd.append(i)
                while odd[0] <= i - window:
                    odd.popleft()
                if len(odd) >= cfg.odd_chars:
                    self._pos += len(delta)
                    return _hit(
                        "odd_chars",
                        f"{len(odd)} unusual code points (controls, private use, "
                        f"U+FFFD ...) within {window} characters, last {c!r}",
                        i + 1,
                        odd[0],
                        count=len(odd),
                    )
        self._pos += len(delta)
        return None
