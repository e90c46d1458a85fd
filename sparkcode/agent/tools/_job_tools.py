"""The tools over a session's background jobs (:mod:`._jobs`): ``job_output`` reads
a job's new output and state, ``job_stop`` ends it. ``bash`` with ``background``
starts one (:func:`start_background`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ._base import Tool, ToolContext, ToolError, ToolOutput
from ._jobs import Job, JobError, JobTable
from ._sandbox import denial_in

SETTLE_S = 1.0
"""How long a background start waits to see the command fail at once (a sandbox
denial, a typo): then it reports like a foreground command."""
MAX_WAIT_S = 60.0
"""The most ``job_output`` waits for new output."""


@contextlib.contextmanager
def _as_tool_error() -> Iterator[None]:
    try:
        yield
    except JobError as exc:
        raise ToolError(str(exc)) from None


def _table(ctx: ToolContext) -> JobTable:
    if ctx.jobs is None:
        raise ToolError("background jobs are not available in this session")
    return ctx.jobs


async def start_background(command: str, ctx: ToolContext) -> ToolOutput:
    """Start ``command`` as a job (in ``ctx.sandbox`` when set) and report its id and
    first output; a command that ends within :data:`SETTLE_S` is reported as a
    foreground one is (exit code, output, the sandbox's denial)."""
    table = _table(ctx)
    argv = (
        ["bash", "-c", command] if ctx.sandbox is None else ctx.sandbox.argv(command, ctx.workspace)
    )
    with _as_tool_error():
        job = await table.start(command, argv, ctx.workspace, sandboxed=ctx.sandbox is not None)
    await table.settle(job, SETTLE_S)
    output = job.read_new().rstrip("\n")
    if not job.running:
        text = f"{job.describe()}\n{output}"
        if ctx.sandbox is not None and job.returncode != 0:
            marker = denial_in(output)
            if marker is not None:
                return ToolOutput(text, sandbox_denied=marker)
        return ToolOutput(text)
    note = ""
    if ctx.sandbox is not None and not ctx.sandbox.network:
        note = (
            "\n(it runs in the sandbox without network: a server it starts is reachable "
            "only from inside this same job, not from other commands)"
        )
    first = f"\noutput so far:\n{output}" if output else "\nno output yet"
    return ToolOutput(
        f"started {job.describe()}{first}{note}\njob_output with job_id "
        f"{job.id} shows its new output; job_stop ends it."
    )


def _job_id_parameter() -> dict[str, Any]:
    return {"type": "integer", "description": "The job's number (bash background returned it)."}


class JobOutput(Tool):
    def __init__(self) -> None:
        super().__init__(
            name="job_output",
            description="Show a background job's new output since you last looked (the "
            "newest 16 KiB) and whether it still runs or its exit code.",
            parameters={
                "job_id": _job_id_parameter(),
                "wait_s": {
                    "type": "number",
                    "description": "Seconds to wait for new output or the job's end "
                    f"(default 0, at most {MAX_WAIT_S:g}).",
                },
            },
            kind="read",
            required=("job_id",),
        )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        table = _table(ctx)
        with _as_tool_error():
            job = table.get(args.get("job_id"))
        wait = args.get("wait_s") or 0
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or wait < 0:
            raise ToolError(
                f"wait_s must be a number of seconds from 0 to {MAX_WAIT_S:g}, got {wait!r}"
            )
        await table.wait_output(job, min(float(wait), MAX_WAIT_S))
        return ToolOutput(_report(job))


class JobStop(Tool):
    def __init__(self) -> None:
        super().__init__(
            name="job_stop",
            description="Stop a background job and every process it started; shows its "
            "last output.",
            parameters={"job_id": _job_id_parameter()},
            kind="state",
            required=("job_id",),
        )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        table = _table(ctx)
        with _as_tool_error():
            job = table.get(args.get("job_id"))
        was_running, left = job.running, not job.running and job.group_alive()
        await table.stop(job)
        report = _report(job)
        if was_running:
            return ToolOutput(report)
        what = "; the processes it left running were stopped" if left else ""
        return ToolOutput(f"(it had already ended{what})\n{report}")


def _report(job: Job) -> str:
    output = job.read_new().rstrip("\n")
    return f"{job.describe()}\n{output if output else '(no new output)'}"
