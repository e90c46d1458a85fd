"""Rerun results as a table (CLI, TUI) and as JSON."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sparkcode.sessions import Session, exchange_output

from ._detect import detector_verdict
from ._rerun import RerunResult, model_turns, seed_note


def results_json(session: Session, results: Sequence[RerunResult]) -> dict[str, Any]:
    """Everything a rerun (or a matrix of reruns) found, for ``--json`` and the TUI."""
    recorded = []
    for number, exchange in enumerate(model_turns(session), start=1):
        output = exchange_output(exchange)
        recorded.append(
            {
                "turn": number,
                "request": exchange.index,
                "tokens": output.completion_tokens,
                "finish": output.finish_reason,
                "detector": detector_verdict(output),
            }
        )
    return {
        "session": session.id,
        "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "recorded": recorded,
        "seed_note": seed_note(session),
        "runs": [r.to_json() for r in results],
    }


def table(data: dict[str, Any]) -> str:
    """Turns down, configurations across: ``=`` identical, ``≠@N`` first divergence at
    token N, ``DEGEN`` the detector fired, ``ERR`` the request failed."""
    runs = data.get("runs", [])
    recorded = {r["turn"]: r for r in data.get("recorded", [])}
    headers = ["turn", "recorded", *[str(r["target"]) for r in runs]]
    rows: list[list[str]] = []
    for number in sorted(recorded):
        rec = recorded[number]
        row = [str(number), "DEGEN" if rec.get("detector") else f"{rec.get('tokens') or '?'} tok"]
        for run in runs:
            turn = next((t for t in run["turns"] if t["turn"] == number), None)
            row.append("-" if turn is None else _cell(turn))
        rows.append(row)
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines)


def _cell(turn: dict[str, Any]) -> str:
    parts: list[str] = []
    if turn["status"] == "identical":
        parts.append("=")
    elif turn["status"] == "diverged" and turn.get("divergence"):
        parts.append(f"≠@{turn['divergence']['token']}")
    else:
        parts.append("ERR")
    if turn.get("rerun_detector"):
        parts.append("DEGEN")
    return " ".join(parts)


def details(data: dict[str, Any]) -> str:
    """Each divergence with both continuations, and each detector hit."""
    out: list[str] = []
    if data.get("seed_note"):
        out.append(f"note: {data['seed_note']}")
    for run in data.get("runs", []):
        for turn in run["turns"]:
            where = f"[{run['target']}] turn {turn['turn']} (request {turn['request']})"
            div = turn.get("divergence")
            if turn["status"] == "diverged" and div:
                exact = "" if turn.get("exact_tokens") else " (token index approximate)"
                out.append(
                    f"{where}: first divergence at token {div['token']}{exact}, "
                    f"{div['channel']}, after ...{div['common']!r}"
                )
                out.append(f"    recorded: {div['recorded']!r}")
                out.append(f"    rerun:    {div['rerun']!r}")
            elif turn["status"] == "error":
                out.append(f"{where}: request failed: {turn.get('error')}")
            hit = turn.get("rerun_detector")
            if hit:
                fired = hit.get("pattern") or hit.get("reason") or "degenerate"
                out.append(f"{where}: degeneration detector fired ({fired}) in {hit['channel']}")
    return "\n".join(out)
