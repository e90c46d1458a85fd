"""Running hooks: a user's command on an agent event, Claude Code's contract.

Each hook (:class:`~sparkcode.hooks.HookSpec`) is ``bash -c COMMAND`` in
the workspace, in its own process group, with the event's JSON on stdin::

    {"session_id": ..., "transcript_path": ..., "cwd": ..., "hook_event_name":
     "PostToolUse", "tool_name": "edit_file", "tool_input": {...},
     "tool_response": "..."}

(``prompt`` for ``UserPromptSubmit``, ``stop_hook_active`` for ``Stop``,
``source`` for ``SessionStart``). ``SPARKCODE_PROJECT_DIR`` and
``CLAUDE_PROJECT_DIR`` name the workspace. The exit code decides:

- 0: fine; stdout is shown to the user (and, for ``UserPromptSubmit`` and
  ``SessionStart``, added to the prompt as context, as Claude Code does);
- 2: block: ``PreToolUse`` the tool does not run and stderr is its result;
  ``PostToolUse`` stderr is appended to the result; ``UserPromptSubmit`` the
  prompt is not sent; ``Stop`` the model is told to go on, stderr its message;
- anything else, a crash or a timeout: an error shown to the user; the turn
  goes on as if the hook were not there.

Hooks never run inside the shell sandbox: they are the user's own commands,
like ``config.toml``'s MCP servers. A timeout (default 60 s) kills the whole
process group, so a hook that started a server or ``sleep`` does not linger.
Output kept per stream is capped at :data:`OUTPUT_CAP` characters.

The declarations and the trust are :mod:`sparkcode.hooks`; which hooks a session
runs and the line a front shows for a run are :mod:`sparkcode.hooks.session`. This
module stays in the agent: the loop and a turn call it at their events and it yields
the agent's ``HookRan``, so in ``sparkcode/hooks/`` it would be the circle
hooks -> agent -> hooks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...hooks import HookEvent, HookSpec
from ..core.events import HookRan

OUTPUT_CAP = 10_000
"""Characters of one hook's stdout or stderr kept (a formatter's diff fits)."""
STOP_CONTINUES = 3
"""Times a turn's Stop hooks may send the model back to work; then the turn ends,
so a hook that always exits 2 cannot keep the engine busy forever."""


@dataclass(frozen=True)
class HookContext:
    """What every hook of a session is told about it."""

    workspace: Path
    session_id: str
    transcript_path: str = ""


class Hooks:
    """A session's hooks: the user's and, when trusted, the project's."""

    def __init__(self, specs: Sequence[HookSpec], context: HookContext) -> None:
        self.specs = tuple(specs)
        self.context = context

    def __bool__(self) -> bool:
        return bool(self.specs)

    def matching(self, event: HookEvent, tool: str | None = None) -> list[HookSpec]:
        return [s for s in self.specs if s.event == event and s.matches(tool)]

    async def run(
        self,
        event: HookEvent,
        fields: dict[str, Any],
        *,
        tool: str | None = None,
        call_id: str | None = None,
    ) -> list[HookRan]:
        """Run the hooks matching ``event`` (and ``tool``) one after another, in the
        order declared (a formatter before a linter), each with the payload."""
        specs = self.matching(event, tool)
        if not specs:
            return []
        payload = {
            "session_id": self.context.session_id,
            "transcript_path": self.context.transcript_path,
            "cwd": str(self.context.workspace),
            "hook_event_name": event,
            **fields,
        }
        data = json.dumps(payload, ensure_ascii=False, default=str).encode()
        return [
            await run_hook(spec, data, self.context.workspace, call_id=call_id, tool=tool)
            for spec in specs
        ]


async def run_hook(
    spec: HookSpec,
    stdin: bytes,
    workspace: Path,
    *,
    call_id: str | None = None,
    tool: str | None = None,
) -> HookRan:
    """Run one hook to its end or its timeout; never raises for the hook's faults."""
    started = time.monotonic()
    env = {
        **os.environ,
        "SPARKCODE_PROJECT_DIR": str(workspace),
        "CLAUDE_PROJECT_DIR": str(workspace),
    }

    def ran(code: int | None, out: str, err: str, timed_out: bool = False) -> HookRan:
        return HookRan(
            hook_event=spec.event,
            command=spec.command,
            source=spec.source,
            exit_code=code,
            stdout=out,
            stderr=err,
            blocked=code == 2,
            timed_out=timed_out,
            duration_s=time.monotonic() - started,
            call_id=call_id,
            tool=tool,
        )

    try:
        proc = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            spec.command,
            cwd=workspace,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        return ran(None, "", f"the hook could not start: {exc}")
    out, err = bytearray(), bytearray()

    async def pump(stream: asyncio.StreamReader | None, into: bytearray) -> None:
        while stream is not None and (chunk := await stream.read(65536)):
            if len(into) < 4 * OUTPUT_CAP:  # bytes: room for multi-byte text
                into += chunk

    async def feed() -> None:
        assert proc.stdin is not None
        with contextlib.suppress(ConnectionError):  # a hook need not read its stdin
            proc.stdin.write(stdin)
            await proc.stdin.drain()
            proc.stdin.close()

    readers = [
        asyncio.ensure_future(pump(proc.stdout, out)),
        asyncio.ensure_future(pump(proc.stderr, err)),
        asyncio.ensure_future(feed()),
    ]
    timed_out = False
    deadline = time.monotonic() + spec.timeout_s
    try:
        # Polled: asyncio's ``wait()`` also waits for the pipes to close, which a
        # background child holding them would delay to the timeout.
        while proc.returncode is None and not timed_out:
            await asyncio.sleep(0.02)
            timed_out = time.monotonic() > deadline
        if not timed_out:
            # Give the output a moment to drain, then the group is killed (the
            # hook's own exit code stands).
            await asyncio.wait(readers, timeout=0.5)
    finally:
        _kill_group(proc.pid)
        await asyncio.wait(readers, timeout=2.0)
        for task in readers:
            task.cancel()
        if proc.returncode is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 5.0)
    if timed_out:
        return ran(
            None,
            _text(bytes(out)),
            f"the hook timed out after {spec.timeout_s:g}s; its process group was killed",
            timed_out=True,
        )
    return ran(proc.returncode, _text(bytes(out)), _text(bytes(err)))


def _text(data: bytes) -> str:
    text = data.decode("utf-8", "replace").rstrip("\n")
    if len(text) <= OUTPUT_CAP:
        return text
    return text[:OUTPUT_CAP] + f"\n[... {len(text) - OUTPUT_CAP} characters of hook output cut]"


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def blocked_reason(runs: Sequence[HookRan]) -> str | None:
    """The model-facing reason of the first blocking hook (None: nothing blocked)."""
    for r in runs:
        if r.blocked:
            return r.stderr.strip() or f"blocked by the {r.hook_event} hook `{r.command}`"
    return None


def added_context(runs: Sequence[HookRan]) -> str:
    """What successful hooks printed, for the events whose stdout joins the prompt."""
    return "\n".join(r.stdout.strip() for r in runs if r.exit_code == 0 and r.stdout.strip())


__all__ = [
    "OUTPUT_CAP",
    "STOP_CONTINUES",
    "HookContext",
    "Hooks",
    "added_context",
    "before_prompt",
    "blocked_reason",
    "run_hook",
]


async def before_prompt(
    hooks: Hooks, prompt: str, session_source: str | None
) -> tuple[list[HookRan], str | None, str]:
    """A turn's first hooks: ``SessionStart`` (first turn of the session object;
    ``source`` is ``startup`` or ``resume``), then ``UserPromptSubmit``. Returns
    the runs, why the prompt is refused (None: it goes), and the context their
    stdout adds to the prompt."""
    runs: list[HookRan] = []
    if session_source is not None:
        runs += await hooks.run("SessionStart", {"source": session_source})
    submitted = await hooks.run("UserPromptSubmit", {"prompt": prompt})
    return [*runs, *submitted], blocked_reason(submitted), added_context([*runs, *submitted])
