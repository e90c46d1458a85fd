"""The bash tool: one command in the workspace, in its own process group.

A timeout kills the whole group (so ``make`` and its children die too; inside
the sandbox its PID namespace goes with it), and the output kept is bounded
while reading (head and tail), with a note when cut. Which commands run
without approval is :mod:`._readonly`'s and the permission mode's business.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from ._base import Preview, Tool, ToolContext, ToolError, ToolOutput
from ._job_tools import start_background
from ._jobs import group_alive
from ._readonly import is_read_only_command
from ._sandbox import denial_in


class _Capture:
    """Keeps the first and last ``limit // 2`` bytes of a stream."""

    def __init__(self, limit: int) -> None:
        self.half = max(limit // 2, 1)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > self.half:
                del self.tail[: len(self.tail) - self.half]

    def text(self) -> str:
        head = self.head.decode("utf-8", "replace")
        if self.total <= len(self.head) + len(self.tail):
            return head + self.tail.decode("utf-8", "replace")
        cut = self.total - len(self.head) - len(self.tail)
        return (
            f"{head}\n[... output capped: {cut} bytes omitted of {self.total} ...]\n"
            f"{self.tail.decode('utf-8', 'replace')}"
        )


_BACKGROUND = {
    "type": "boolean",
    "description": "true to start it as a background job (a server, a watcher) "
    "and get its job id at once; job_output reads it, job_stop "
    "ends it. Default false.",
}


class Bash(Tool):
    def __init__(self, *, background: bool = True) -> None:
        """``background``: offer the ``background`` argument (the job tools are offered)."""
        self.background = background
        super().__init__(
            name="bash",
            description="Run a shell command in the workspace directory and return its exit "
            "code and combined stdout/stderr. Long output is capped; a timeout "
            "kills the command and everything it started.",
            parameters={
                "command": {"type": "string", "description": "The bash command line."},
                "timeout_s": {
                    "type": "number",
                    "description": "Seconds before it is killed (default 120).",
                },
                "sandbox": {
                    "type": "boolean",
                    "description": "false to ask the user to run it outside the "
                    "sandbox (needs network or writes outside the "
                    "workspace); default true.",
                },
                **({"background": _BACKGROUND} if background else {}),
            },
            kind="shell",
            required=("command",),
        )

    def is_read_only(self, args: dict[str, Any], workspace: Path) -> bool:
        command = args.get("command")
        return isinstance(command, str) and is_read_only_command(command, workspace)

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> Preview:
        command = str(args.get("command", ""))
        as_job = args.get("background") is True or (self.background and ends_in_background(command))
        how = "run in the background" if as_job else "run"
        return Preview(
            summary=f"{how}: {command.splitlines()[0][:100] if command else ''}", detail=command
        )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        command = args["command"]
        if not isinstance(command, str) or not command.strip():
            raise ToolError("command must be a non-empty string")
        background = args.get("background", False)
        if not isinstance(background, bool):
            raise ToolError(f"background must be true or false, got {background!r}")
        if background:
            return await start_background(command, ctx)
        if self.background and ends_in_background(command) and ctx.jobs is not None:
            out = await start_background(command.rstrip()[:-1].rstrip(), ctx)
            return replace(out, text=f"{AS_JOB}\n{out.text}")
        timeout = args.get("timeout_s") or ctx.bash_timeout_s
        try:
            timeout = float(timeout)
        except (TypeError, ValueError):
            raise ToolError(f"timeout_s must be a number, got {timeout!r}") from None
        return await run_command(command, ctx, timeout, background_offered=self.background)


LEFT_RUNNING = (
    "note: what this command started with `&` did not outlive it (a "
    "command's processes end with it)"
)
"""Said after a foreground command that backgrounded a process (``server &``): seen in a
tmux trial, the 1.5B started ``nohup python3 -m http.server 8765 &``, read exit code 0
and went on as if the server ran."""
USE_BACKGROUND = "; start a server with background: true and read it with job_output"
RUN_IN_ONE = "; run what needs it in the same command (`server & sleep 1; curl ...; kill %1`)"


AS_JOB = "(the command ends with `&`: it was started as a background job, as with background: true)"
"""Said when a trailing ``&`` made a job: in a tmux trial the 1.5B, offered
``background``, wrote ``python3 -m http.server 8765 &`` and then asked job_output for
job 1, four times."""


def _tokens(command: str) -> list[str]:
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    try:
        return list(lexer)
    except ValueError:  # unbalanced quotes: bash will say so
        return []


def ends_in_background(command: str) -> bool:
    """The whole command is ``X &``: one lone ``&``, as its last token."""
    tokens = _tokens(command)
    return len(tokens) > 1 and tokens[-1] == "&" and tokens.count("&") == 1


def backgrounds(command: str) -> bool:
    """``command`` has a lone ``&`` (not ``&&``, ``>&``, ``&>`` or a quoted one)."""
    return "&" in command and "&" in _tokens(command)


async def run_command(
    command: str, ctx: ToolContext, timeout: float, *, background_offered: bool = False
) -> ToolOutput:
    """Run ``command`` (inside ``ctx.sandbox`` when set) and report its result."""
    started = time.monotonic()
    argv = (
        ["bash", "-c", command] if ctx.sandbox is None else ctx.sandbox.argv(command, ctx.workspace)
    )
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=ctx.workspace,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    capture = _Capture(ctx.output_cap)
    assert proc.stdout is not None
    stdout = proc.stdout

    async def pump() -> None:
        while chunk := await stdout.read(65536):
            capture.feed(chunk)

    reader = asyncio.ensure_future(pump())
    timed_out = False
    try:
        await asyncio.wait_for(proc.wait(), timeout)
        # Background children may hold the pipe open: give them a moment, then kill.
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(reader), 0.5)
    except TimeoutError:
        timed_out = True
    finally:
        # In the sandbox the PID namespace has already ended them; outside, the kill does.
        left_running = (
            not timed_out
            and backgrounds(command)
            and (ctx.sandbox is not None or group_alive(proc.pid))
        )
        _kill_group(proc.pid)
        if left_running:
            await _until_gone(proc.pid)
        if not reader.done():
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(reader, 2.0)
        if proc.returncode is None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(proc.wait(), 5.0)
    output = capture.text().rstrip("\n")
    elapsed = time.monotonic() - started
    if timed_out:
        return ToolOutput(
            f"[timed out after {timeout:g}s; the command and its process group "
            f"were killed]\n{output}"
        )
    text = f"exit code {proc.returncode} ({elapsed:.1f}s)\n{output}"
    if left_running:
        text += f"\n{LEFT_RUNNING}{USE_BACKGROUND if background_offered else RUN_IN_ONE}"
    if ctx.sandbox is not None and proc.returncode != 0:
        marker = denial_in(output)
        if marker is not None:
            return ToolOutput(text, sandbox_denied=marker)
    return ToolOutput(text)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def _until_gone(pgid: int, seconds: float = 3.0) -> None:
    """Wait (at most ``seconds``) until group ``pgid`` has no live process: SIGKILL is
    delivered at once but the kernel tears a process down later, and on a loaded
    2-core machine a killed ``http.server`` was still listed (then a zombie) when the
    result said it had ended; the next command reusing its port must find it free."""
    deadline = time.monotonic() + seconds
    while group_alive(pgid) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
