"""The agent suite's numbers: totals, per kind and per task for each target,
the Markdown tables and ``agent.png``, all recomputed from the raw tries in
``results.json`` (so ``bench report`` gives what the run printed)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._agent_tasks import KINDS
from ._stats import spread

if TYPE_CHECKING:
    from ._report._columns import Column

CELL = (
    "success/tries · tool calls (malformed) · degenerate stops · completion tokens per "
    "try, median · wall s per try, median"
)


def group(units: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of a set of tries."""
    return {
        "tries": len(units),
        "success": sum(1 for u in units if u["success"]),
        "tool_calls": sum(u["tool_calls"] for u in units),
        "malformed_calls": sum(u["malformed_calls"] for u in units),
        "salvaged_replies": sum(u["salvaged_replies"] for u in units),
        "degenerate": sum(1 for u in units if u["degenerate"]),
        "errors": sum(1 for u in units if u["error"]),
        "completion_tokens": spread([u["completion_tokens"] for u in units]),
        "wall_s": spread([u["wall_s"] for u in units]),
        "ended_by": dict(Counter(str(u["reason"]) for u in units)),
    }


def summarize(col: Column) -> dict[str, Any]:
    units = list(col.units.values())
    order = col.data["settings"]["task_ids"]
    tasks = {t: group([u for u in units if u["task"] == t]) for t in order}
    kinds = {
        k: group([u for u in units if u["kind"] == k])
        for k in KINDS
        if any(u["kind"] == k for u in units)
    }
    solved = sum(1 for g in tasks.values() if g["success"])
    return {
        **group(units),
        "tasks": len(order),
        "tasks_solved": solved,
        "by_kind": kinds,
        "by_task": tasks,
        "kind_of": {u["task"]: u["kind"] for u in units},
        "sessions": [u["session"] for u in units if u.get("session")],
        "host_load_1m": spread([u.get("host_load_1m") for u in units]),
    }


def _pct(success: int, tries: int) -> str:
    return f"{success} / {tries} ({100 * success / tries:.0f}%)" if tries else "–"


def _med(s: dict[str, Any], fmt: str) -> str:
    return "–" if not s["n"] else f"{s['median']:{fmt}}"


def _range(s: dict[str, Any], fmt: str) -> str:
    if not s["n"]:
        return "–"
    return f"{s['median']:{fmt}} ({s['min']:{fmt}}–{s['max']:{fmt}})"


def cell(g: dict[str, Any] | None) -> str:
    if not g or not g["tries"]:
        return "–"
    return (
        f"{g['success']}/{g['tries']} · {g['tool_calls']} ({g['malformed_calls']}) · "
        f"{g['degenerate']} · {_med(g['completion_tokens'], '.0f')} · "
        f"{_med(g['wall_s'], '.1f')} s"
    )


def _rows(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def table(cols: list[Column]) -> str:
    sums = [summarize(c) for c in cols]
    names = [c.name for c in cols]
    rows = [
        ["success / tries", *[_pct(s["success"], s["tries"]) for s in sums]],
        ["tasks solved at least once", *[f"{s['tasks_solved']} / {s['tasks']}" for s in sums]],
        *[
            [
                f"success, {k}",
                *[
                    _pct(
                        s["by_kind"].get(k, {}).get("success", 0),
                        s["by_kind"].get(k, {}).get("tries", 0),
                    )
                    for s in sums
                ],
            ]
            for k in KINDS
            if any(k in s["by_kind"] for s in sums)
        ],
        ["tool calls (malformed)", *[f"{s['tool_calls']} ({s['malformed_calls']})" for s in sums]],
        ["replies with salvaged calls", *[str(s["salvaged_replies"]) for s in sums]],
        ["degenerate stops", *[str(s["degenerate"]) for s in sums]],
        ["request errors", *[str(s["errors"]) for s in sums]],
        [
            "completion tokens per try, median (min–max)",
            *[_range(s["completion_tokens"], ".0f") for s in sums],
        ],
        ["wall s per try, median (min–max)", *[_range(s["wall_s"], ".1f") for s in sums]],
        [
            "turns ended by",
            *[", ".join(f"{r} {n}" for r, n in sorted(s["ended_by"].items())) for s in sums],
        ],
        ["host load (1 min) after the tries", *[_range(s["host_load_1m"], ".1f") for s in sums]],
    ]
    settings = cols[0].data["settings"]
    text = "## sparkcode bench agent\n\n" + _rows(["", *names], rows) + "\n"
    kinds = [k for k in KINDS if any(k in s["by_kind"] for s in sums)]
    text += (
        "\n### by kind\n\n"
        + _rows(["kind", *names], [[k, *[cell(s["by_kind"].get(k)) for s in sums]] for k in kinds])
        + "\n"
    )
    order = list(dict.fromkeys(t for s in sums for t in s["by_task"]))
    kind_of = {t: k for s in sums for t, k in s["kind_of"].items()}
    text += (
        "\n### by task\n\n"
        + _rows(
            ["task", "kind", *names],
            [[t, kind_of.get(t, ""), *[cell(s["by_task"].get(t)) for s in sums]] for t in order],
        )
        + "\n"
    )
    mode = {None: "the profile's", True: "on", False: "off"}[settings["structured_tools"]]
    notes = [
        f"cells: {CELL}.",
        f"{settings['tries']} tries per task (session seed {settings['seed']} + try − 1); "
        f"at most {settings['max_turns']} model requests per try"
        + (f" of at most {settings['max_tokens']} tokens" if settings["max_tokens"] else "")
        + f", stopped after {settings['try_timeout_s']:g} s"
        + (
            f"; {settings['jobs']} tries at a time (wall times include the waiting)"
            if settings.get("jobs", 1) > 1
            else ""
        )
        + (
            "; a task's later tries skipped once one passed (--until-pass: pass@n as "
            "with every try, success counts only the tries made)"
            if settings.get("until_pass")
            else ""
        )
        + f"; small-model mode {mode}; shell commands "
        + ("in the bubblewrap sandbox" if settings["sandbox"] else "unconfined (--no-sandbox)")
        + (
            "; language-server diagnostics in edit results "
            + ("on" if settings.get("diagnostics", True) else "off (--no-diagnostics)")
        )
        + ". A try succeeds when every condition of its task's check holds (docs/bench.md).",
    ]
    for c, s in zip(cols, sums, strict=True):
        if s["sessions"]:
            notes.append(
                f"{c.name}: failed tries' sessions (`sparkcode replay ID`): "
                + ", ".join(s["sessions"][:12])
                + (f" and {len(s['sessions']) - 12} more" if len(s["sessions"]) > 12 else "")
                + "."
            )
    return text + "\n" + "\n".join(f"- {n}" for n in notes) + "\n"


def plot(cols: list[Column], out_dir: Path) -> list[Path]:
    """``agent.png``: success per kind and overall, one bar per target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sums = [summarize(c) for c in cols]
    groups = [k for k in KINDS if any(k in s["by_kind"] for s in sums)] + ["all"]
    width = 0.8 / len(cols)
    fig, ax = plt.subplots(figsize=(2 + 1.1 * len(groups) * max(1, len(cols) / 2), 3.8))
    for n, (c, s) in enumerate(zip(cols, sums, strict=True)):
        figures = [
            s["by_kind"].get(k, {"success": 0, "tries": 0}) if k != "all" else s for k in groups
        ]
        ys = [100 * g["success"] / g["tries"] if g["tries"] else 0.0 for g in figures]
        xs = [i + (n - (len(cols) - 1) / 2) * width for i in range(len(groups))]
        drawn = ax.bar(xs, ys, width=width, label=c.name)
        ax.bar_label(drawn, labels=[f"{g['success']}/{g['tries']}" for g in figures], fontsize=7)
    ax.set_xticks(range(len(groups)), groups, rotation=20, ha="right", fontsize=8)
    ax.set_ylim(0, 110)
    ax.set_ylabel("tries that succeeded (%)")
    ax.set_title("agent suite")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = out_dir / "agent.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]
