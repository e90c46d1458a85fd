"""PNG plots of a report's columns (matplotlib, imported only when plotting)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ._columns import Column
from ._summary import summarize
from ._table import steps_text


def plot(cols: list[Column], out_dir: Path) -> list[Path]:
    """The PNG plots for columns of one kind, written into ``out_dir``."""
    if cols[0].data["kind"] == "agent":
        from .. import _agent_report

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

    def bars(
        ax: Any,
        values: list[float | None],
        lows: list[float] | None = None,
        highs: list[float] | None = None,
        labels: list[str] | None = None,
    ) -> None:
        ys = [v or 0.0 for v in values]
        err = None
        if lows is not None and highs is not None:
            err = [
                [max(y - lo, 0) for y, lo in zip(ys, lows, strict=True)],
                [max(hi - y, 0) for y, hi in zip(ys, highs, strict=True)],
            ]
        drawn = ax.bar(range(len(ys)), ys, yerr=err, capsize=4, color="#4477aa")
        if labels is not None:
            # The value on each bar: a 0% bar is otherwise indistinguishable from no data.
            ax.bar_label(drawn, labels=labels, fontsize=8)
        ax.set_xticks(range(len(ys)), names, rotation=15, ha="right", fontsize=8)

    if kind == "humaneval":
        fig, ax = plt.subplots(figsize=(5 + len(cols), 3.5))
        bars(
            ax,
            [(s["pass_at_1"] or 0) * 100 for s in sums],
            labels=[f"{s['passed']} / {s['problems']}" for s in sums],
        )
        ax.set_ylabel("pass@1 (%)")
        ax.set_ylim(0, 100)
        ax.set_title("HumanEval pass@1")
        save(fig, "humaneval.png")
    elif kind == "throughput":
        panels = [
            (f"decode tok/s ({k})", [s["decode"].get(k, {}).get("tok_s") for s in sums])
            for k in cols[0].data["settings"]["kinds"]
        ]
        panels += [
            (f"prefill tok/s ({n} cold)", [s["prefill"].get(str(n), {}).get("tok_s") for s in sums])
            for n in cols[0].data["settings"]["prefill_lengths"]
        ]
        turn = cols[0].data["settings"].get("turn_tokens") or 0
        panels += [
            (
                f"TTFT s, {turn} after {n} cached",
                [s["turn"].get(str(n), {}).get("ttft_s") for s in sums],
            )
            for n in (cols[0].data["settings"]["prefill_lengths"] if turn else [])
        ]
        panels = [(t, st) for t, st in panels if any(x and x["n"] for x in st)]
        if not panels:
            return written
        fig, axes = plt.subplots(
            1, len(panels), figsize=(3.2 * len(panels) + 1, 3.5), squeeze=False
        )
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
        bars(
            ax,
            [float(s["degenerate"]) for s in sums],
            labels=[f"{s['degenerate']} / {s['samples']}" for s in sums],
        )
        ax.set_ylim(0, max(1, *(s["samples"] for s in sums)))
        ax.set_ylabel(f"degenerate of {sums[0]['samples']}")
        ax.set_title("loop probe")
        save(fig, "loops.png")
    else:
        fig, ax = plt.subplots(figsize=(6, 3.8))
        series = [
            (
                c.name + tag,
                [x for k, u in c.units.items() if k.startswith(prefix + ":") for x in u["kl"]],
            )
            for c in cols
            for prefix, tag in (("cmp", ""), ("floor", " (noise floor)"))
        ]
        series = [(name, kl) for name, kl in series if kl]
        edges = kl_bins([x for _, kl in series for x in kl])
        for name, kl in series:
            ax.hist(
                [max(x, KL_FLOOR) for x in kl], bins=edges, histtype="step", label=name, log=True
            )
        ax.set_xscale("log")
        ax.set_xlabel(f"per-token KL (nats; below {KL_FLOOR:g} drawn at {KL_FLOOR:g})")
        ax.set_ylabel("positions")
        ax.legend(fontsize=7)
        ax.set_title(f"KL against {cols[0].data['targets'][0]['label']}")
        save(fig, "kld.png")
    return written


def acceptance_series(
    cols: list[Column], sums: list[dict[str, Any]]
) -> list[tuple[str, list[float]]]:
    """(legend, acceptance per position) for each target and decode prompt that drafted;
    the legend says how many steps drafted, which the per-position shares do not."""
    out = []
    for c, s in zip(cols, sums, strict=True):
        for kind, d in s["decode"].items():
            if d.get("acceptance_per_position"):
                out.append(
                    (
                        f"{c.name}, {kind} ({steps_text(d)} steps drafted)",
                        list(d["acceptance_per_position"]),
                    )
                )
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
    return [KL_FLOOR * ratio**i for i in range(count + 1)]
