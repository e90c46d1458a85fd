"""Finding the text an edit replaces when the model's copy has drifted.

An exact, unique match is always tried first and always wins. Only when the
exact text is absent does :func:`plan_replacement` try, in order: the same
text with the file's line endings (CRLF vs LF); whole lines equal once
trailing whitespace is ignored; whole lines equal once leading whitespace
(indentation, tabs vs spaces) is ignored too. Each tolerant tier must match
exactly one region, or the edit is refused: a tolerant match never guesses
between two places. When indentation differed, the replacement is re-indented
the way the model's copy maps onto the file (per indentation string seen in the
match, else by level), so a block the model re-indented lands at the file's depth.
On a miss, :func:`nearest_region` shows the lines that resemble the copy most.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass

_INDENT = re.compile(r"[ \t]*")


class MatchError(Exception):
    """The edit cannot be placed; the message says why and what to do."""


@dataclass(frozen=True)
class Replacement:
    """Where an edit goes: ``text[start:end]`` becomes ``new``."""

    start: int
    end: int
    new: str
    how: str
    """``exact``, ``line endings``, ``trailing whitespace`` or ``indentation``."""


def _line_ending(text: str) -> str:
    return "\r\n" if "\r\n" in text else "\n"


def _with_ending(s: str, ending: str) -> str:
    s = s.replace("\r\n", "\n")
    return s.replace("\n", ending) if ending != "\n" else s


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _places(text: str, hits: list[int], old: str, most: int = 5) -> str:
    """The lines of each of the first ``most`` matches with the line before, numbered
    as read_file shows them. Told only the line numbers and that replace_all exists,
    Qwen2.5-Coder-1.5B set replace_all on ``n % 2 == 1`` in is_even and so broke
    is_odd (fix-line-even, docs/agent.md); the line before tells the two apart."""
    lines = text.splitlines()
    shown = []
    for i in hits[:most]:
        first = line_of(text, i)
        last = line_of(text, i + max(len(old) - 1, 0))
        shown.append(
            "\n".join(
                f"{n:6}\t{lines[n - 1]}"
                for n in range(max(first - 1, 1), min(last, len(lines)) + 1)
            )
        )
    more = f"\n[{len(hits) - most} more]" if len(hits) > most else ""
    return "\n---\n".join(shown) + more


def _one_place_at_a_time(text: str, hits: list[int], old: str) -> str:
    """What to copy instead of an ambiguous ``old`` when ``replace_all`` is hidden.
    A whole line is enough where each place's lines occur once in the file (told so,
    the 1.5B edited one place of a rename); where they repeat (``return a - b`` in
    add and in sub, fix-line-add) no line is, and the 1.5B, told to copy one,
    rewrote the file with read_file's framing until the loop guard stopped it
    (docs/agent.md): there the line before must come too."""
    whole = []
    for i in hits:
        start = text.rfind("\n", 0, i) + 1
        end = text.find("\n", i + max(len(old), 1) - 1)
        whole.append(text[start : end if end >= 0 else len(text)])
    if all(len(exact_matches(text, block)) == 1 for block in whole):
        return (
            "edit one place at a time: copy one whole line below as old_string, so it "
            "matches exactly once"
        )
    return (
        "edit one place at a time: these lines repeat in the file, so copy one place "
        "below together with the line before it (both lines) as old_string, so it "
        "matches exactly once"
    )


def exact_matches(text: str, needle: str) -> list[int]:
    out, start = [], 0
    while (i := text.find(needle, start)) >= 0:
        out.append(i)
        start = i + 1
    return out


def plan_replacement(
    text: str, old: str, new: str, shown: str, replace_all_offered: bool = True
) -> Replacement:
    """The single place ``old`` matches in ``text``, exactly or after drift.

    Raises :class:`MatchError` for several places (exact or tolerant) or none. Where
    the model is not offered ``replace_all`` (``[agent] hidden_arguments``) the error
    does not suggest it: told to set it, the 1.5B sent the same bare ``calc_total``
    edit until the loop guard stopped it; told to copy one whole line, it edited one
    place.
    """
    hits = exact_matches(text, old)
    if len(hits) == 1:
        return _flush_left(text, hits[0], old, new) or Replacement(
            hits[0], hits[0] + len(old), new, "exact"
        )
    if len(hits) > 1:
        lines = ", ".join(str(line_of(text, i)) for i in hits[:10])
        how = (
            "include more surrounding lines so it matches exactly once, or set "
            "replace_all to true only if every one should change"
            if replace_all_offered
            else _one_place_at_a_time(text, hits, old)
        )
        raise MatchError(
            f"old_string occurs {len(hits)} times in {shown} (at lines {lines}); "
            f"{how}. Each place with the line before it:\n" + _places(text, hits, old)
        )
    ending = _line_ending(text)
    old_e, new_e = _with_ending(old, ending), _with_ending(new, ending)
    if old_e != old:
        hits = exact_matches(text, old_e)
        if len(hits) == 1:
            return Replacement(hits[0], hits[0] + len(old_e), new_e, "line endings")
        if len(hits) > 1:
            _ambiguous(text, hits, shown, "once line endings are normalised")
    for tier in ("trailing whitespace", "indentation"):
        found = _line_match(text, old_e, new_e, ending, tier, shown)
        if found is not None:
            return found
    raise MatchError(not_found_message(text, old, shown))


def _flush_left(text: str, at: int, old: str, new: str) -> Replacement | None:
    """An exact match of one line's text copied without its indentation, replaced by
    several lines written shallower than that line: the model wrote them relative to
    its flush-left copy, so they are moved to the line's depth. Added lines at or
    past the line's depth could be meant either way: refused. Anything else that
    matched exactly is replaced exactly as sent."""
    line_start = text.rfind("\n", 0, at) + 1
    ws = text[line_start:at]
    if not ws or ws.strip() or old[:1] in (" ", "\t") or old.rstrip("\r\n").count("\n"):
        return None
    lines = _split(new)
    later = [ln for ln in lines[1:] if ln.strip()]
    if not later:
        return None
    if any(_columns(_indent(ln), 4) >= _columns(ws, 4) for ln in later):
        raise MatchError(
            f"old_string matches line {line_of(text, at)} without its indentation "
            f"({len(ws)} characters), so it is unclear whether the lines new_string adds "
            "are indented relative to it or as written; copy old_string with the line's "
            "indentation"
        )
    shifted = lines[:1] + [ws + ln if ln.strip() else ln for ln in lines[1:]]
    return Replacement(at, at + len(old), "".join(shifted), "indentation")


def _ambiguous(text: str, starts: list[int], shown: str, how: str) -> None:
    lines = ", ".join(str(line_of(text, i)) for i in starts[:10])
    raise MatchError(
        f"old_string was not found exactly in {shown}, and {how} it matches "
        f"{len(starts)} places (lines {lines}); include more surrounding lines "
        "so it matches once"
    )


def _split(text: str) -> list[str]:
    """Lines with their endings kept."""
    return text.splitlines(keepends=True)


def _body(line: str) -> str:
    return line.rstrip("\r\n")


def _key(line: str, tier: str) -> str:
    body = _body(line).rstrip()
    return body.lstrip() if tier == "indentation" else body


def _line_match(
    text: str, old: str, new: str, ending: str, tier: str, shown: str
) -> Replacement | None:
    old_lines = _split(old)
    while old_lines and not old_lines[0].strip():
        old_lines.pop(0)  # a leading blank line is drift too; the match starts at content
    if not old_lines:
        return None
    old_keys = [_key(ln, tier) for ln in old_lines]
    file_lines = _split(text)
    file_keys = [_key(ln, tier) for ln in file_lines]
    k = len(old_keys)
    starts = [i for i in range(len(file_keys) - k + 1) if file_keys[i : i + k] == old_keys]
    if not starts:
        return None
    offsets = [0]
    for ln in file_lines:
        offsets.append(offsets[-1] + len(ln))
    if len(starts) > 1:
        what = (
            "indentation and trailing whitespace"
            if tier == "indentation"
            else "trailing whitespace"
        )
        _ambiguous(text, [offsets[i] for i in starts], shown, f"ignoring {what}")
    i = starts[0]
    matched = file_lines[i : i + k]
    start, end = offsets[i], offsets[i + k]
    # old_string without a final line break stops before the file's line break.
    if not old_lines[-1].endswith(("\n", "\r")) and matched[-1].endswith("\n"):
        end -= len(matched[-1]) - len(_body(matched[-1]))
    if tier == "indentation":
        new = reindent(new, old_lines, matched, text)
    return Replacement(start, end, new, tier)


def _indent(line: str) -> str:
    m = _INDENT.match(line)
    return m.group(0) if m else ""


def _file_unit(text: str) -> int:
    """Spaces per indentation level in a space-indented file (4 when unclear)."""
    widths = {
        len(_indent(ln)) for ln in text.splitlines() if ln.strip() and "\t" not in _indent(ln)
    }
    g = 0
    for w in widths:
        g = math.gcd(g, w)
    return g if 2 <= g <= 8 else 4


def _columns(ws: str, unit: int) -> int:
    return sum(unit if c == "\t" else 1 for c in ws)


def reindent(new: str, old_lines: list[str], matched: list[str], text: str) -> str:
    """``new`` with each line's indentation translated from the model's copy to the file.

    An indentation string that occurs in the copy maps to what the file has on the
    matched line (it must always map to the same one, or the copy's structure does
    not fit the file and the edit is refused). Any other (a line the edit adds
    deeper or shallower) keeps its offset from the copy's first line, converted to
    the file's indentation character: a tab is one level of ``unit`` spaces.
    """
    table: dict[str, str] = {}
    for o, f in zip(old_lines, matched, strict=True):
        if not o.strip():
            continue
        got = table.setdefault(_indent(o), _indent(f))
        if got != _indent(f):
            raise MatchError(
                "old_string matches only if indentation is ignored, and its indentation "
                "does not correspond to the file's line by line (the same indentation stands "
                "for different depths), so new_string cannot be placed safely; copy "
                "old_string with the file's indentation"
            )
    base_o = next(_indent(o) for o in old_lines if o.strip())
    base_f = table[base_o]
    f_tab = any("\t" in _indent(f) for f in matched if f.strip()) or (
        not any(_indent(f) for f in matched if f.strip()) and "\n\t" in text
    )
    unit = 4 if f_tab else _file_unit(text)  # spaces per level, a tab being one level
    for o, f in table.items():
        # Where the copy's tabs meet the file's spaces (or the reverse), the match
        # itself says how many spaces a level is.
        tabs, spaces = (f, o) if f_tab else (o, f)
        if (
            tabs
            and tabs.strip("\t") == ""
            and spaces.strip(" ") == ""
            and spaces
            and len(spaces) % len(tabs) == 0
            and o != f
        ):
            unit = len(spaces) // len(tabs)
            break
    out = []
    for line in _split(new):
        if not line.strip():
            out.append(line)
            continue
        ws = _indent(line)
        if ws in table:
            mapped = table[ws]
        else:
            cols = max(_columns(base_f, unit) + _columns(ws, unit) - _columns(base_o, unit), 0)
            mapped = "\t" * (cols // unit) + " " * (cols % unit) if f_tab else " " * cols
        out.append(mapped + line[len(ws) :])
    return "".join(out)


def nearest_region(text: str, needle: str, *, context: int = 2, limit: int = 30) -> str | None:
    """The lines of ``text`` that look most like ``needle``, numbered, or None."""
    want = [ln.strip() for ln in needle.splitlines() if ln.strip()]
    lines = text.splitlines()
    if not want or not lines:
        return None
    stripped = [ln.strip() for ln in lines]
    k = max(1, len(needle.strip().splitlines()))
    wanted = set(want)
    # Cheap pass: windows sharing the most lines with the copy; then compare text.
    scores = []
    for i in range(max(1, len(lines) - k + 1)):
        shared = sum(1 for s in stripped[i : i + k] if s in wanted)
        scores.append((shared, i))
    scores.sort(key=lambda t: (-t[0], t[1]))
    candidates = [i for _, i in scores[:8]]
    close = difflib.get_close_matches(want[0], stripped, n=3, cutoff=0.5)
    candidates += [i for i, s in enumerate(stripped) if s in close][:3]
    target = "\n".join(want)
    best: tuple[int, float] = (0, 0.0)
    best_i = -1
    for i in dict.fromkeys(candidates):
        window = "\n".join(s for s in stripped[i : i + k] if s)
        ratio = difflib.SequenceMatcher(None, target, window, autojunk=False).ratio()
        shared = sum(1 for s in stripped[i : i + k] if s in wanted)
        # Lines the copy has word for word count first; similarity breaks ties.
        if (shared, ratio) > best:
            best, best_i = (shared, ratio), i
    if best_i < 0 or (best[0] == 0 and best[1] < 0.5):
        return None
    lo = max(0, best_i - context)
    hi = min(len(lines), best_i + k + context, lo + limit)
    return "\n".join(f"{n + 1:6}\t{lines[n]}" for n in range(lo, hi))


def not_found_message(text: str, needle: str, shown: str) -> str:
    msg = (
        f"old_string was not found in {shown}, not even ignoring line endings, trailing "
        "whitespace and indentation."
    )
    region = nearest_region(text, needle)
    if region is None:
        return msg + " Nothing in the file resembles it; read the file again."
    first, last = region.splitlines()[0], region.splitlines()[-1]
    span = f"{first.split(chr(9))[0].strip()}-{last.split(chr(9))[0].strip()}"
    return msg + f" The nearest region is lines {span}; copy old_string from it exactly:\n" + region
