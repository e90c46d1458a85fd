"""Results to numbers a reader compares: per-target summaries, a Markdown table
with the targets side by side, and PNG plots. Everything here is recomputed
from the raw units in ``results.json``, so ``bench report`` gives the same
table as the run that wrote them."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._kld import summarize_pairs
from ._stats import spread


@dataclass(frozen=True)
class Column:
    """One target of one result directory."""

    name: str
    data: dict[str, Any]
    label: str

    @property
    def units(self) -> dict[str, Any]:
        units: dict[str, Any] = self.data["units"].get(self.label, {})
        return units


def columns(results: list[dict[str, Any]], dirs: list[Path] | None = None) -> list[Column]:
    out: list[Column] = []
    labels = [t["label"] for data in results for t in data["targets"]]
    for n, data in enumerate(results):
        for target in data["targets"]:
            label = target["label"]
            name = label if labels.count(label) == 1 or dirs is None \
                else f"{dirs[n].name}/{label}"
            out.append(Column(name, data, label))
    return out


# -- summaries ---------------------------------------------------------------------------

def summarize(col: Column) -> dict[str, Any]:
    kind = col.data["kind"]
    if kind == "agent":
        from . import _agent_report  # it imports Column from here

        return _agent_report.summarize(col)
    return {"humaneval": _humaneval, "throughput": _throughput, "loops": _loops,
            "kld": _kld}[kind](col)


def _humaneval(col: Column) -> dict[str, Any]:
    units = col.units
    n = len(units)
    passed = sum(1 for u in units.values() if u["passed"])
    out: dict[str, Any] = {
        "problems": n, "passed": passed, "pass_at_1": passed / n if n else None,
        "empty_answers": sum(1 for u in units.values() if not u["content"].strip()),
        "cut_at_max_tokens": sum(1 for u in units.values() if u["finish_reason"] == "length"),
        "completion_tokens": spread([u["completion_tokens"] for u in units.values()]),
        "extraction": dict(Counter(u["extraction"] for u in units.values())),
        "outcomes": dict(Counter(u["base"]["status"] for u in units.values())),
    }
    if any("passed_plus" in u for u in units.values()):
        plus = sum(1 for u in units.values() if u.get("passed_plus"))
        out.update(passed_plus=plus, pass_at_1_plus=plus / n if n else None)
    return out


def _throughput(col: Column) -> dict[str, Any]:
    units = col.units
    out: dict[str, Any] = {"decode": {}, "prefill": {}}
    consistent = True
    for key, u in units.items():
        if key.startswith("decode:"):
            consistent &= u["completion_tokens"] == u["final_usage_completion_tokens"]
    for kind in col.data["settings"]["kinds"]:
        runs = [u for k, u in units.items() if k.startswith(f"decode:{kind}:")]
        if not runs:
            continue
        specs = [u["spec"] for u in runs if u.get("spec") and u["spec"]["drafts"]]
        per_pos = [s["per_position"] for s in specs if s.get("per_position")]
        out["decode"][kind] = {
            "tok_s": spread([u["decode_tok_s"] for u in runs]),
            "ttft_s": spread([u["ttft_s"] for u in runs]),
            "tokens": spread([u["completion_tokens"] for u in runs]),
            "acceptance_length": spread([s["acceptance_length"] for s in specs]) if specs
            else None,
            "acceptance_per_position": [sum(p[i] for p in per_pos) / len(per_pos)
                                        for i in range(len(per_pos[0]))] if per_pos else None,
            "drafted_steps": spread([u["spec"]["drafts"] for u in runs if u.get("spec")]),
            "decode_steps": spread([decode_steps(u) for u in runs]),
        }
    for length in col.data["settings"]["prefill_lengths"]:
        runs = [u for k, u in units.items() if k.startswith(f"prefill:{length}:")]
        if runs:
            out["prefill"][str(length)] = {
                "tok_s": spread([u["prefill_tok_s"] for u in runs]),
                "ttft_s": spread([u["ttft_s"] for u in runs]),
                "cached_tokens": [u["cached_tokens"] for u in runs]}
    out["usage_consistent"] = consistent
    out["host_load_1m"] = spread([u.get("host_load_1m") for u in units.values()])
    out["idle_checks"] = dict(Counter(u["idle_check"] for u in units.values()))
    return out


def decode_steps(unit: dict[str, Any]) -> float | None:
    """Engine steps after the first token: each emits one token plus the draft tokens
    it accepted, so steps = tokens − 1 − accepted (exact from usage and /metrics; a
    drafter such as n-gram proposes only on some steps, and acceptance length counts
    those alone)."""
    spec = unit.get("spec")
    if not spec or unit.get("completion_tokens") is None:
        return None
    return float(unit["completion_tokens"] - 1 - spec["accepted"])


def _loops(col: Column) -> dict[str, Any]:
    units = col.units
    bad = [u for u in units.values() if u["degenerate"]]
    return {"samples": len(units), "degenerate": len(bad),
            "patterns": dict(Counter(u["pattern"] for u in bad)),
            "sessions": [u["session"] for u in bad],
            "completion_tokens": spread([u["completion_tokens"] for u in units.values()]),
            "decode_tok_s": spread([u["decode_tok_s"] for u in units.values()])}


def _kld_of(units: dict[str, Any], text: str = "") -> dict[str, Any]:
    """Perplexity, coverage and both comparisons over the units of one text set
    (``text`` empty: all of them)."""
    tag = f"{text}:" if text else ""
    mine = [u for k, u in units.items() if k.startswith("a:" + tag)]
    n = sum(u["n"] for u in mine)
    return {
        "positions": n,
        "perplexity": math.exp(sum(u["nll_sum"] for u in mine) / n) if n else None,
        "top_k": min((u["top_k"] for u in mine), default=None),
        "topk_coverage": sum(u["coverage_sum"] for u in mine) / n if n else None,
        "vs_reference": summarize_pairs(units, "cmp" + (":" + text if text else "")),
        "noise_floor": summarize_pairs(units, "floor" + (":" + text if text else "")),
    }


def kld_texts(data: dict[str, Any]) -> list[str]:
    """The text sets' names as they appear in unit keys (``code``, ``prose``, a file name)."""
    return [Path(t).name for t in data["settings"]["texts"]]


def _kld(col: Column) -> dict[str, Any]:
    out = {"reference": col.data["targets"][0]["label"], **_kld_of(col.units)}
    texts = kld_texts(col.data)
    if len(texts) > 1:
        out["by_text"] = {t: _kld_of(col.units, t) for t in texts}
    return out


# -- tables ------------------------------------------------------------------------------

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
        from . import _agent_report

        return _agent_report.table(cols)
    sums = [summarize(c) for c in cols]
    header = ["", *[c.name for c in cols]]
    rows: list[list[str]] = []
    notes: list[str] = []
    if kind == "humaneval":
        rows.append(["pass@1", *[_f(s["pass_at_1"] * 100 if s["pass_at_1"] is not None
                                    else None, ".1f", "%") for s in sums]])
        rows.append(["passed / problems", *[f"{s['passed']} / {s['problems']}" for s in sums]])
        if any("pass_at_1_plus" in s for s in sums):
            rows.append(["pass@1 HumanEval+", *[_f(s.get("pass_at_1_plus", 0) * 100, ".1f", "%")
                                                for s in sums]])
        rows.append(["empty answers", *[str(s["empty_answers"]) for s in sums]])
        rows.append(["cut at max_tokens", *[str(s["cut_at_max_tokens"]) for s in sums]])
        rows.append(["completion tokens, median (min–max)",
                     *[_mmm(s["completion_tokens"], ".0f") for s in sums]])
        notes.append("pass@1 = passed / problems, one greedy sample each (temperature 0, "
                     "fixed seed); code extracted and run identically for every target "
                     "(docs/bench.md).")
        notes += humaneval_diff(cols)
    elif kind == "throughput":
        kinds = cols[0].data["settings"]["kinds"]
        for k in kinds:
            rows.append([f"decode tok/s, {k}",
                         *[_mmm(s["decode"].get(k, {}).get("tok_s")) for s in sums]])
            rows.append([f"TTFT s, {k} prompt",
                         *[_mmm(s["decode"].get(k, {}).get("ttft_s"), ".3f") for s in sums]])
            rows.append([f"tokens generated, {k}",
                         *[_mmm(s["decode"].get(k, {}).get("tokens"), ".0f") for s in sums]])
            rows.append([f"acceptance length, {k}",
                         *[_mmm((s["decode"].get(k) or {}).get("acceptance_length"), ".2f")
                           for s in sums]])
            rows.append([f"acceptance per position, {k}", *[
                " ".join(f"{p:.2f}" for p in (s["decode"].get(k) or {})
                         .get("acceptance_per_position") or []) or "–" for s in sums]])
            rows.append([f"drafted steps / decode steps, {k}",
                         *[_steps(s["decode"].get(k) or {}) for s in sums]])
        for length in cols[0].data["settings"]["prefill_lengths"]:
            rows.append([f"prefill tok/s, {length} tokens cold",
                         *[_mmm(s["prefill"].get(str(length), {}).get("tok_s"), ".0f")
                           for s in sums]])
            rows.append([f"TTFT s, {length} tokens cold",
                         *[_mmm(s["prefill"].get(str(length), {}).get("ttft_s"), ".3f")
                           for s in sums]])
        rows.append(["host load average (1 min) at the runs",
                     *[_mmm(s["host_load_1m"], ".1f") for s in sums]])
        rows.append(["token counts = final usage",
                     *["yes" if s["usage_consistent"] else "NO" for s in sums]])
        notes.append("median (min–max) over "
                     f"{cols[0].data['settings']['repeats']} runs each; warm-up excluded.")
        notes.append("decode tok/s = (usage completion tokens at the last token − those in "
                     "the first frame) / (last − first token arrival): the single-stream "
                     "inverse of `vllm bench serve`'s TPOT, llama-benchy's tg; never SSE "
                     "frames. prefill tok/s = N / TTFT for a prompt of exactly N tokens "
                     "(/tokenize), cold (fresh cache_salt): llama-benchy's pp. acceptance "
                     "length = 1 + accepted / drafts, over the steps that drafted (drafted "
                     "steps / decode steps: how many did; decode steps = tokens − 1 − "
                     "accepted); per position i = accepted at i / drafts (/metrics deltas). "
                     "Definitions: docs/bench.md.")
        for c in cols:
            skipped = next((t.get("skipped_prefill") for t in c.data["targets"]
                            if t["label"] == c.label), None)
            for length, why in (skipped or {}).items():
                notes.append(f"{c.name}: prefill {length}: {why}.")
    elif kind == "loops":
        rows.append(["degenerate / samples",
                     *[f"{s['degenerate']} / {s['samples']}" for s in sums]])
        rows.append(["detector rules", *[", ".join(f"{p} {n}" for p, n in s["patterns"].items())
                                         or "–" for s in sums]])
        rows.append(["completion tokens, median (min–max)",
                     *[_mmm(s["completion_tokens"], ".0f") for s in sums]])
        rows.append(["decode tok/s", *[_mmm(s["decode_tok_s"]) for s in sums]])
        notes.append("degenerate = the streaming detector (sparkcode detect) fired on the "
                     "sample's reasoning + content.")
        for c, s in zip(cols, sums, strict=True):
            if s["sessions"]:
                notes.append(f"{c.name}: degenerate samples saved as sessions "
                             + ", ".join(s["sessions"]) + " (`sparkcode replay ID --play`).")
    else:
        rows.append(["perplexity", *[_f(s["perplexity"], ".3f") for s in sums]])
        rows.append(["top-k coverage (mean mass)",
                     *[_f(s["topk_coverage"], ".3f") for s in sums]])
        for title, key in (("vs reference", "vs_reference"), ("noise floor", "noise_floor")):
            rows.append([f"KLD {title}, nats/token", *[_kld_cell(s[key]) for s in sums]])
            rows.append([f"top-1 agreement {title}",
                         *[_f(s[key]["top1_agreement"] * 100, ".2f", "%") if s[key] else "–"
                           for s in sums]])
        rows.append(["positions", *[str(s["positions"]) for s in sums]])
        for text in kld_texts(cols[0].data) if len(kld_texts(cols[0].data)) > 1 else []:
            parts = [(s.get("by_text") or {}).get(text) or {} for s in sums]
            rows.append([f"perplexity, {text}", *[_f(p.get("perplexity"), ".3f")
                                                  for p in parts]])
            rows.append([f"KLD vs reference, {text}",
                         *[_kld_cell(p.get("vs_reference")) for p in parts]])
            rows.append([f"KLD noise floor, {text}",
                         *[_kld_cell(p.get("noise_floor")) for p in parts]])
        notes.append(f"reference: {sums[0]['reference']}; KLD = mean KL(reference ‖ target) "
                     "per token in nats [95% bootstrap CI over chunks], over the union of both "
                     "top-k sets plus a tail bucket (leans low when the top k miss mass: see "
                     "top-k coverage); noise floor = the reference run twice; perplexity = "
                     "exp(mean NLL) of the text (docs/bench.md).")
    text = f"## sparkcode bench {kind}\n\n" + _table(header, rows) + "\n"
    if notes:
        text += "\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    return text


def _steps(decode: dict[str, Any]) -> str:
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
        lines.append(f"{first.name} passes, {other.name} fails ({len(only_a)}): "
                     + (", ".join(only_a) or "none"))
        lines.append(f"{other.name} passes, {first.name} fails ({len(only_b)}): "
                     + (", ".join(only_b) or "none"))
        same = sum(1 for t in common
                   if first.units[t]["content"] == other.units[t]["content"])
        lines.append(f"{first.name} and {other.name} gave the same answer text on {same} of "
                     f"{len(common)} problems")
    return lines


# -- plots -------------------------------------------------------------------------------

def plot(cols: list[Column], out_dir: Path) -> list[Path]:
    """The PNG plots for columns of one kind, written into ``out_dir``."""
    if cols[0].data["kind"] == "agent":
        from . import _agent_report

        return _agent_report.plot(cols, out_dir)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kind = cols[0].data["kind"]
    sums = [summarize(c) for c in cols]
    names = [c.name for c in cols]
    written: list[Path] = []

    def save(fig: Any, name: str) -> None:
        path = out_dir / name
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    def bars(ax: Any, values: list[float | None], lows: list[float] | None = None,
             highs: list[float] | None = None, labels: list[str] | None = None) -> None:
        ys = [v or 0.0 for v in values]
        err = None
        if lows is not None and highs is not None:
            err = [[max(y - lo, 0) for y, lo in zip(ys, lows, strict=True)],
                   [max(hi - y, 0) for y, hi in zip(ys, highs, strict=True)]]
        drawn = ax.bar(range(len(ys)), ys, yerr=err, capsize=4, color="#4477aa")
        if labels is not None:
            # The value on each bar: a 0% bar is otherwise indistinguishable from no data.
            ax.bar_label(drawn, labels=labels, fontsize=8)
        ax.set_xticks(range(len(ys)), names, rotation=15, ha="right", fontsize=8)

    if kind == "humaneval":
        fig, ax = plt.subplots(figsize=(5 + len(cols), 3.5))
        bars(ax, [(s["pass_at_1"] or 0) * 100 for s in sums],
             labels=[f"{s['passed']} / {s['problems']}" for s in sums])
        ax.set_ylabel("pass@1 (%)")
        ax.set_ylim(0, 100)
        ax.set_title("HumanEval pass@1")
        save(fig, "humaneval.png")
    elif kind == "throughput":
        panels = [(f"decode tok/s ({k})", [s["decode"].get(k, {}).get("tok_s") for s in sums])
                  for k in cols[0].data["settings"]["kinds"]]
        panels += [(f"prefill tok/s ({n} cold)",
                    [s["prefill"].get(str(n), {}).get("tok_s") for s in sums])
                   for n in cols[0].data["settings"]["prefill_lengths"]]
        panels = [(t, st) for t, st in panels if any(x and x["n"] for x in st)]
        if not panels:
            return written
        fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels) + 1, 3.5),
                                 squeeze=False)
        for ax, (title, stats) in zip(axes[0], panels, strict=True):
            med = [st["median"] if st and st["n"] else None for st in stats]
            lo = [st["min"] if st and st["n"] else 0.0 for st in stats]
            hi = [st["max"] if st and st["n"] else 0.0 for st in stats]
            bars(ax, med, lo, hi)
            ax.set_title(title, fontsize=9)
        save(fig, "throughput.png")
        per_pos = acceptance_series(cols, sums)
        if per_pos:
            fig, ax = plt.subplots(figsize=(5.5, 3.5))
            for name, values in per_pos:
                ax.plot(range(1, len(values) + 1), values, marker="o", label=name)
            ax.set_xticks(range(1, max(len(v) for _, v in per_pos) + 1))
            ax.set_ylim(0, 1.05)
            ax.set_xlabel("draft position")
            ax.set_ylabel("accepted / drafts")
            ax.legend(fontsize=7)
            save(fig, "acceptance.png")
    elif kind == "loops":
        fig, ax = plt.subplots(figsize=(5 + len(cols), 3.5))
        bars(ax, [float(s["degenerate"]) for s in sums],
             labels=[f"{s['degenerate']} / {s['samples']}" for s in sums])
        ax.set_ylim(0, max(1, *(s["samples"] for s in sums)))
        ax.set_ylabel(f"degenerate of {sums[0]['samples']}")
        ax.set_title("loop probe")
        save(fig, "loops.png")
    else:
        fig, ax = plt.subplots(figsize=(6, 3.8))
        series = [(c.name + tag, [x for k, u in c.units.items() if k.startswith(prefix + ":")
                                  for x in u["kl"]])
                  for c in cols for prefix, tag in (("cmp", ""), ("floor", " (noise floor)"))]
        series = [(name, kl) for name, kl in series if kl]
        edges = kl_bins([x for _, kl in series for x in kl])
        for name, kl in series:
            ax.hist([max(x, KL_FLOOR) for x in kl], bins=edges, histtype="step", label=name,
                    log=True)
        ax.set_xscale("log")
        ax.set_xlabel(f"per-token KL (nats; below {KL_FLOOR:g} drawn at {KL_FLOOR:g})")
        ax.set_ylabel("positions")
        ax.legend(fontsize=7)
        ax.set_title(f"KL against {cols[0].data['targets'][0]['label']}")
        save(fig, "kld.png")
    return written


def acceptance_series(cols: list[Column], sums: list[dict[str, Any]]
                      ) -> list[tuple[str, list[float]]]:
    """(legend, acceptance per position) for each target and decode prompt that drafted;
    the legend says how many steps drafted, which the per-position shares do not."""
    out = []
    for c, s in zip(cols, sums, strict=True):
        for kind, d in s["decode"].items():
            if d.get("acceptance_per_position"):
                out.append((f"{c.name}, {kind} ({_steps(d)} steps drafted)",
                            list(d["acceptance_per_position"])))
    return out


KL_FLOOR = 1e-6
"""Per-token KL values below this (a deterministic noise floor is exactly 0) are
drawn at it on the plot's log axis."""


def kl_bins(values: list[float], count: int = 40) -> list[float]:
    """Log-spaced histogram edges shared by every series, from ``KL_FLOOR`` to past the
    largest value (each series binned alone gave a zero-only floor a bin an order wider
    than the whole other distribution)."""
    top = max([KL_FLOOR * 10, *values]) * 1.001
    ratio = (top / KL_FLOOR) ** (1 / count)
    return [KL_FLOOR * ratio ** i for i in range(count + 1)]


def write_outputs(data: dict[str, Any], out_dir: Path) -> tuple[str, list[Path]]:
    """table.md, summary (into the data) and plots of one result directory."""
    cols = columns([data])
    data["summary"] = {c.label: summarize(c) for c in cols}
    text = table(cols)
    (out_dir / "table.md").write_text(text, encoding="utf-8")
    return text, plot(cols, out_dir)
