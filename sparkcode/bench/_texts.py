"""The texts benchmarks read: held-out code and prose shipped with Python itself,
and prompts cut to an exact token count with the server's ``/tokenize``.

Code is a few standard-library modules late in the alphabet (the test
tokenizers and the quantizer's calibration read the first ones); prose is the
Python reference documentation in ``pydoc_data.topics``. Both are on every
machine that runs sparkcode, so every target reads the same bytes.
"""

from __future__ import annotations

import sysconfig
from collections.abc import Awaitable, Callable
from pathlib import Path

from engine.errors import UserError

CODE_MODULES = ("statistics", "textwrap", "shlex", "heapq", "fractions", "tokenize")


def code_text() -> str:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return "\n\n".join((stdlib / f"{name}.py").read_text(encoding="utf-8") for name in CODE_MODULES)


def prose_text() -> str:
    from pydoc_data.topics import topics

    return "\n\n".join(topics[key].strip() for key in sorted(topics))


def text_set(name: str) -> str:
    if name == "code":
        return code_text()
    if name == "prose":
        return prose_text()
    path = Path(name)
    if not path.is_file():
        raise UserError(f"--text {name}: no such file (or say code or prose)")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read --text {name}: {exc}") from None


Counter = Callable[[str], Awaitable[int]]


async def exact_prefix(text: str, tokens: int, count: Counter) -> tuple[str, int, int]:
    """The shortest prefix of ``text`` (repeated if too short) that is exactly
    ``tokens`` tokens long, by bisection on the character count.

    Token counts grow with the prefix, but not strictly (a character can merge
    two tokens into one), so after bisection the neighbourhood is searched for
    an exact hit. Returns (prefix, its token count, /tokenize calls).
    """
    calls = 0

    async def n(length: int) -> int:
        nonlocal calls
        calls += 1
        return await count(source[:length])

    if not text:
        raise UserError("the text is empty")
    source = text
    while await n(len(source)) < tokens:
        source = source + "\n\n" + text
    lo, hi = 0, len(source)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if await n(mid) < tokens:
            lo = mid
        else:
            hi = mid
    best = hi
    found = await n(best)
    for delta in range(1, 33):
        if found == tokens:
            break
        for cand in (hi - delta, hi + delta):
            if 0 < cand <= len(source):
                got = await n(cand)
                if got == tokens:
                    best, found = cand, got
                    break
    return source[:best], found, calls
