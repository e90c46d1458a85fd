"""The Markdown table with the targets side by side, and its notes."""

from __future__ import annotations

from typing import Any

from ._columns import Column
from ._summary import kld_texts, summarize


def _f(value: Any, fmt: str = ".2f", unit: str = "") -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:{fmt}}{unit}"
    return f"{value}{unit}"


def _mmm(s: dict[str, Any] | None, fmt: str = ".1f") -> str:
    if not s or not s.get("n"):
        return "–"
    if s["n"] == 1:
        return _f(s["median"], fmt)
    return f"{s['median']:{fmt}} ({s['min']:{fmt}}–{s['max']:{fmt}})"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def table(cols: list[Column]) -> str:
    """The Markdown table (and notes) for columns of one kind."""
    kind = cols[0].data["kind"]
    if kind == "agent":
        from .. import _agent_report

        return _agent_report.table(cols)
    sums = [summarize(c) for c in cols]
    header = ["", *[c.name for c in cols]]
    rows: list[list[str]] = []
    notes: list[str] = []
    if kind == "humaneval":
        rows.append(
            [
                "pass@1",
                *[
                    _f(s["pass_at_1"] * 100 if s["pass_at_1"] is not None else None, ".1f", "%")
                    for s in sums
                ],
            ]
        )
        rows.append(["passed / problems", *[f"{s['passed']} / {s['problems']}" for s in sums]])
        if any("pass_at_1_plus" in s for s in sums):
            rows.append(
                [
                    "pass@1 HumanEval+",
                    *[_f(s.get("pass_at_1_plus", 0) * 100, ".1f", "%") for s in sums],
                ]
            )
        rows.append(["empty answers", *[str(s["empty_answers"]) for s in sums]])
        rows.append(["cut at max_tokens", *[str(s["cut_at_max_tokens"]) for s in sums]])
        rows.append(
            [
                "completion tokens, median (min–max)",
                *[_mmm(s["completion_tokens"], ".0f") for s in sums],
            ]
        )
        notes.append(
            "pass@1 = passed / problems, one greedy sample each (temperature 0, "
            "fixed seed); code extracted and run identically for every target "
            "(docs/bench.md)."
        )
        notes += humaneval_diff(cols)
    elif kind == "throughput":
        kinds = cols[0].data["settings"]["kinds"]
        for k in kinds:
            rows.append(
                [f"decode tok/s, {k}", *[_mmm(s["decode"].get(k, {}).get("tok_s")) for s in sums]]
            )
            rows.append(
                [
                    f"TTFT s, {k} prompt",
                    *[_mmm(s["decode"].get(k, {}).get("ttft_s"), ".3f") for s in sums],
                ]
            )
            rows.append(
                [
                    f"tokens generated, {k}",
                    *[_mmm(s["decode"].get(k, {}).get("tokens"), ".0f") for s in sums],
                ]
            )
            rows.append(
                [
                    f"acceptance length, {k}",
                    *[
                        _mmm((s["decode"].get(k) or {}).get("acceptance_length"), ".2f")
                        for s in sums
                    ],
                ]
            )
            rows.append(
                [
                    f"acceptance per position, {k}",
                    *[
                        " ".join(
                            f"{p:.2f}"
                            for p in (s["decode"].get(k) or {}).get("acceptance_per_position") or []
                        )
                        or "–"
                        for s in sums
                    ],
                ]
            )
            rows.append(
                [
                    f"drafted steps / decode steps, {k}",
                    *[steps_text(s["decode"].get(k) or {}) for s in sums],
                ]
            )
        for length in cols[0].data["settings"]["prefill_lengths"]:
            rows.append(
                [
                    f"prefill tok/s, {length} tokens cold",
                    *[_mmm(s["prefill"].get(str(length), {}).get("tok_s"), ".0f") for s in sums],
                ]
            )
            rows.append(
                [
                    f"TTFT s, {length} tokens cold",
                    *[_mmm(s["prefill"].get(str(length), {}).get("ttft_s"), ".3f") for s in sums],
                ]
            )
        turn = cols[0].data["settings"].get("turn_tokens") or 0
        for length in cols[0].data["settings"]["prefill_lengths"] if turn else []:
            turns = [s["turn"].get(str(length)) or {} for s in sums]
            rows.append(
                [
                    f"TTFT s, a turn of {turn} tokens after {length}",
                    *[_mmm(t.get("ttft_s"), ".3f") for t in turns],
                ]
            )
            rows.append(
                [
                    "cached tokens of that turn",
                    *[
                        " ".join(
                            "–" if c is None else f"{c:.0f}" for c in t.get("cached_tokens") or []
                        )
                        or "–"
                        for t in turns
                    ],
                ]
            )
            rows.append(
                [
                    "re-prefilled tokens of that turn",
                    *[
                        " ".join(
                            "–" if c is None else f"{c:.0f}"
                            for c in t.get("reprefilled_tokens") or []
                        )
                        or "–"
                        for t in turns
                    ],
                ]
            )
            rows.append(
                [
                    f"cold TTFT at {length} / turn TTFT",
                    *[_f(t.get("cold_over_turn"), ".1f", "x") for t in turns],
                ]
            )
        rows.append(
            [
                "host load average (1 min) at the runs",
                *[_mmm(s["host_load_1m"], ".1f") for s in sums],
            ]
        )
        rows.append(
            [
                "token counts = final usage",
                *["yes" if s["usage_consistent"] else "NO" for s in sums],
            ]
        )
        notes.append(
            "median (min–max) over "
            f"{cols[0].data['settings']['repeats']} runs each; warm-up excluded."
        )
        notes.append(
            "decode tok/s = (usage completion tokens at the last token − those in "
            "the first frame) / (last − first token arrival): the single-stream "
            "inverse of `vllm bench serve`'s TPOT, llama-benchy's tg; never SSE "
            "frames. prefill tok/s = N / TTFT for a prompt of exactly N tokens "
            "(/tokenize), cold (fresh cache_salt): llama-benchy's pp. acceptance "
            "length = 1 + accepted / drafts, over the steps that drafted (drafted "
            "steps / decode steps: how many did; decode steps = tokens − 1 − "
            "accepted); per position i = accepted at i / drafts (/metrics deltas). "
            "Definitions: docs/bench.md."
        )
        if turn:
            notes.append(
                f"turn: the history (N tokens, exact) sent once under a fresh "
                f"cache_salt, then it plus {turn} new tokens under the same salt, "
                "timed: an agent's next request. cached tokens: usage's "
                "prompt_tokens_details, else /metrics prefix-cache hits; 0 means "
                "the prefix cache did not serve it."
            )
        for c in cols:
            skipped = next(
                (t.get("skipped_prefill") for t in c.data["targets"] if t["label"] == c.label), None
            )
            for length, why in (skipped or {}).items():
                what = length if length.startswith("turn") else f"prefill {length}"
                notes.append(f"{c.name}: {what}: {why}.")
    elif kind == "loops":
        rows.append(
            ["degenerate / samples", *[f"{s['degenerate']} / {s['samples']}" for s in sums]]
        )
        rows.append(
            [
                "detector rules",
                *[", ".join(f"{p} {n}" for p, n in s["patterns"].items()) or "–" for s in sums],
            ]
        )
        rows.append(
            [
                "completion tokens, median (min–max)",
                *[_mmm(s["completion_tokens"], ".0f") for s in sums],
            ]
        )
        rows.append(["decode tok/s", *[_mmm(s["decode_tok_s"]) for s in sums]])
        notes.append(
            "degenerate = the streaming detector (sparkcode detect) fired on the "
            "sample's reasoning + content."
        )
        for c, s in zip(cols, sums, strict=True):
            if s["sessions"]:
                notes.append(
                    f"{c.name}: degenerate samples saved as sessions "
                    + ", ".join(s["sessions"])
                    + " (`sparkcode replay ID --play`)."
                )
    else:
        rows.append(["perplexity", *[_f(s["perplexity"], ".3f") for s in sums]])
        rows.append(["top-k coverage (mean mass)", *[_f(s["topk_coverage"], ".3f") for s in sums]])
        for title, key in (("vs reference", "vs_reference"), ("noise floor", "noise_floor")):
            rows.append([f"KLD {title}, nats/token", *[_kld_cell(s[key]) for s in sums]])
            rows.append(
                [
                    f"top-1 agreement {title}",
                    *[
                        _f(s[key]["top1_agreement"] * 100, ".2f", "%") if s[key] else "–"
                        for s in sums
                    ],
                ]
            )
        rows.append(["positions", *[str(s["positions"]) for s in sums]])
        for text in kld_texts(cols[0].data) if len(kld_texts(cols[0].data)) > 1 else []:
            parts = [(s.get("by_text") or {}).get(text) or {} for s in sums]
            rows.append([f"perplexity, {text}", *[_f(p.get("perplexity"), ".3f") for p in parts]])
            rows.append(
                [f"KLD vs reference, {text}", *[_kld_cell(p.get("vs_reference")) for p in parts]]
            )
            rows.append(
                [f"KLD noise floor, {text}", *[_kld_cell(p.get("noise_floor")) for p in parts]]
            )
        notes.append(
            f"reference: {sums[0]['reference']}; KLD = mean KL(reference ‖ target) "
            "per token in nats [95% bootstrap CI over chunks], over the union of both "
            "top-k sets plus a tail bucket (leans low when the top k miss mass: see "
            "top-k coverage); noise floor = the reference run twice; perplexity = "
            "exp(mean NLL) of the text (docs/bench.md)."
        )
    text = f"## sparkcode bench {kind}\n\n" + _table(header, rows) + "\n"
    if notes:
        text += "\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    return text


def steps_text(decode: dict[str, Any]) -> str:
    """``drafted / decode`` steps (medians) of one decode summary; ``–`` when not drafted."""
    drafted, steps = decode.get("drafted_steps"), decode.get("decode_steps")
    if not drafted or not drafted.get("n") or not steps or not steps.get("n"):
        return "–"
    return f"{drafted['median']:.0f} / {steps['median']:.0f}"


def _kld_cell(s: dict[str, Any] | None) -> str:
    if not s:
        return "–"
    ci = s["kld_ci95"]
    band = f" [{ci[0]:.4f}, {ci[1]:.4f}]" if ci else ""
    return f"{s['kld_mean']:.4f}{band}"


def humaneval_diff(cols: list[Column]) -> list[str]:
    """Which problems the first target passes and another fails, and the reverse."""
    if len(cols) < 2:
        return []
    first = cols[0]
    lines = []
    for other in cols[1:]:
        order = first.data["settings"].get("task_ids") or list(first.units)
        common = [t for t in order if t in first.units and t in other.units]
        only_a = [t for t in common if first.units[t]["passed"] and not other.units[t]["passed"]]
        only_b = [t for t in common if other.units[t]["passed"] and not first.units[t]["passed"]]
        lines.append(
            f"{first.name} passes, {other.name} fails ({len(only_a)}): "
            + (", ".join(only_a) or "none")
        )
        lines.append(
            f"{other.name} passes, {first.name} fails ({len(only_b)}): "
            + (", ".join(only_b) or "none")
        )
        same = sum(1 for t in common if first.units[t]["content"] == other.units[t]["content"])
        lines.append(
            f"{first.name} and {other.name} gave the same answer text on {same} of "
            f"{len(common)} problems"
        )
    return lines
