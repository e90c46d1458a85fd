"""``sparkcode bench``: HumanEval(+), throughput, the loop probe, KLD and the agent suite,
against profiles, the running engine or any OpenAI-compatible endpoint, side by
side. Every number is defined in docs/bench.md.

A run is :func:`start` (a new result directory) or :func:`resume` (an
interrupted one), then :func:`execute`, which brings each target up in turn,
runs the benchmark's units, saves each as it finishes, and finally writes
``table.md`` and the plots. :func:`report` re-tabulates saved directories.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from engine.errors import UserError
from engine.paths import Paths

from . import _agent, _humaneval, _kld, _loops, _throughput
from ._agent_tasks import load_tasks
from ._report import columns, plot, table, write_outputs
from ._results import KINDS, ResultDir, default_dir
from ._run import Work, console, run_targets
from ._sandbox import Limits, Outcome, isolation, run_program
from ._target import TargetSpec, build_specs, unique_labels
from ._texts import text_set

WORK: dict[str, Work] = {
    "humaneval": _humaneval.run,
    "throughput": _throughput.run,
    "loops": _loops.run,
    "kld": _kld.run,
    "agent": _agent.run,
}

humaneval_settings = _humaneval.settings_from
agent_settings = _agent.settings_from
load_problems = _humaneval.load_problems


def start(
    kind: str, specs: list[TargetSpec], settings: dict[str, Any], out: Path | None
) -> ResultDir:
    labels = unique_labels(specs)
    targets = [
        {"label": label, "spec": spec.to_json(), "done": False}
        for label, spec in zip(labels, specs, strict=True)
    ]
    return ResultDir.create(out or default_dir(kind), kind, settings, targets)


def resume(kind: str, path: Path) -> ResultDir:
    result = ResultDir.load(path, kind)
    if result.data.get("complete"):
        raise UserError(f"{path} is complete already; `sparkcode bench report {path}` shows it")
    if kind == "agent":
        _agent.check_resumable(result.settings)
    return result


def execute(
    result: ResultDir, paths: Paths, *, out: Console | None = None, boot_timeout: float = 900.0
) -> str:
    """Run every unfinished target; returns the Markdown table."""
    specs = [TargetSpec.from_json(t["spec"]) for t in result.data["targets"]]
    labels = [t["label"] for t in result.data["targets"]]
    run_targets(result, specs, labels, paths, WORK[result.kind], out=out, boot_timeout=boot_timeout)
    return finish(result)


def finish(result: ResultDir) -> str:
    """Write table.md, the summary and the plots of what the directory holds."""
    text, _plots = write_outputs(result.data, result.path)
    result.save()
    return text


def report(dirs: list[Path], out: Path | None = None) -> str:
    """Side-by-side table (and plots into ``out``) of saved result directories."""
    if not dirs:
        raise UserError("name at least one result directory")
    loaded = [ResultDir.load(d) for d in dirs]
    kinds = {r.kind for r in loaded}
    if len(kinds) > 1:
        raise UserError(
            f"these directories hold different benchmarks ({', '.join(sorted(kinds))})"
            ": report one kind at a time"
        )
    cols = columns([r.data for r in loaded], [r.path for r in loaded])
    text = table(cols)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "table.md").write_text(text, encoding="utf-8")
        plot(cols, out)
    return text


__all__ = [
    "KINDS",
    "Limits",
    "Outcome",
    "agent_settings",
    "ResultDir",
    "TargetSpec",
    "build_specs",
    "console",
    "execute",
    "finish",
    "humaneval_settings",
    "isolation",
    "load_problems",
    "load_tasks",
    "report",
    "resume",
    "run_program",
    "start",
    "text_set",
]
