"""One benchmark over several targets in turn, saving as it goes.

Each target is brought up (:func:`~._target.open_target`), its fingerprint
saved, and the benchmark's per-target work run with a rich progress bar (ETA
from the units finished so far, resumed ones excluded). Units already in the
result directory are skipped, which is all ``--resume`` needs.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from engine.paths import Paths

from ._results import ResultDir
from ._target import LiveTarget, TargetSpec, open_target

Log = Callable[[str], None]


async def _interruptible(work: Coroutine[Any, Any, None]) -> None:
    """``work``, ending cancelled if it was cancelled at all. On Ctrl-C ``asyncio.run`` cancels
    the main task and raises KeyboardInterrupt only if the task ends cancelled; a library
    that swallows the cancellation (so the held requests finish) would otherwise let an
    interrupted run end as a complete one, exit status 0."""
    await work
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class Bar:
    """A progress bar for one target's units; the ETA counts only units run now."""

    def __init__(self, progress: Progress, description: str, total: int, done: int) -> None:
        self._progress = progress
        self._task: TaskID = progress.add_task(description, total=max(total - done, 0))
        self.total = total
        self.done = done

    def advance(self, note: str | None = None) -> None:
        self.done += 1
        self._progress.advance(self._task)
        if note is not None:
            self._progress.update(self._task, description=note)


@dataclass
class Context:
    """What a benchmark's per-target work gets."""

    result: ResultDir
    target: LiveTarget
    progress: Progress
    log: Log
    paths: Paths
    """The directories ``sparkcode bench`` resolved once (sessions, engine, profiles)."""

    @property
    def label(self) -> str:
        return self.target.label

    @property
    def settings(self) -> dict[str, Any]:
        return self.result.settings

    def bar(self, description: str, keys: list[str]) -> Bar:
        done = sum(1 for k in keys if self.result.done(self.label, k))
        return Bar(self.progress, f"{self.label}: {description}", len(keys), done)


Work = Callable[["Context"], Coroutine[Any, Any, None]]


def console() -> Console:
    return Console(stderr=True, highlight=False)


def run_targets(
    result: ResultDir,
    specs: list[TargetSpec],
    labels: list[str],
    paths: Paths,
    work: Work,
    *,
    out: Console | None = None,
    boot_timeout: float = 900.0,
) -> None:
    """Run ``work`` against every target not yet finished, in order."""
    out = out or console()

    def log(message: str) -> None:
        out.print(message, markup=False)

    for spec, label in zip(specs, labels, strict=True):
        if result.target(label).get("done"):
            log(f"== {label}: finished earlier, skipped")
            continue
        log(f"== {label}")
        with open_target(
            spec, paths, label=label, on_phase=lambda p: log(f"  {p}"), boot_timeout=boot_timeout
        ) as target:
            result.set_target(
                label,
                fingerprint=target.fingerprint,
                model=target.model,
                base_url=target.base_url,
                max_model_len=target.max_model_len,
            )
            columns = (
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
            )
            with Progress(*columns, console=out, transient=not sys.stderr.isatty()) as bar:
                asyncio.run(_interruptible(work(Context(result, target, bar, log, paths))))
        result.set_target(label, done=True)
    result.data["complete"] = True
    result.save()
