"""``!cmd``: a shell command the user runs from the prompt, under the ``bash`` tool's rules.

The command goes through :func:`~._execute.execute_call` as a ``bash`` call, so the
same ``[permissions]`` rules, permission mode, sandbox and approval (the agent's
:meth:`~.loop.Agent.ask_approval`: an :class:`~.events.ApprovalRequested` the front answers)
decide whether and where it runs, with the tool's own timeout and output cap. It is
not a model turn: no request goes out, no hook runs and no undo snapshot is taken.
What it printed waits in :attr:`Agent.pending_context
<sparkcode.agent.core.loop.Agent.pending_context>` and goes at the top of the next user
message (``_turn.py``), so the model sees what the user saw. A refused or declined
command says so and adds nothing.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from ..tools import Bash, ToolContext, ToolRegistry
from ._execute import Ask, execute_call
from .calls import CheckedCall
from .events import ApprovalResolved, Event, Notice, ToolCallStarted
from .permissions import Permissions

CALL_ID_PREFIX = "user-shell-"
"""The call id of a ``!cmd``'s bash call (recorded events: not the model's calls)."""
CONTEXT_CAP = 8_000
"""Characters of a command's output that go into the conversation (head and tail)."""
EMPTY = (
    "'!' needs a command after it: !git status runs it in the workspace under the "
    "shell tool's rules and sends its output with your next message"
)


def context_text(command: str, output: str, cap: int = CONTEXT_CAP) -> str:
    """What the next user message carries for one command: it and its output, the
    middle cut past ``cap`` characters."""
    if len(output) > cap:
        half = cap // 2
        output = (
            f"{output[:half]}\n[... {len(output) - 2 * half} characters cut ...]\n{output[-half:]}"
        )
    return f"[I ran this shell command myself; its result follows]\n$ {command}\n{output}"


async def run_user_shell(
    command: str,
    serial: int,
    *,
    tools: ToolRegistry,
    permissions: Permissions,
    ctx: ToolContext,
    ask: Ask,
    pending: list[str],
) -> AsyncIterator[Event]:
    """Run ``command`` as the user's (``serial`` makes its call id) with the
    conversation's tools, permissions, tool context and approval round trip, yielding
    the bash call's events and a closing :class:`Notice`; what it printed is appended
    to ``pending``. ``ValueError`` when the command is empty."""
    command = command.strip()
    if not command:
        raise ValueError(EMPTY)
    tool = tools.get("bash") or Bash(background=False)
    args = {"command": command}
    raw = json.dumps(args, ensure_ascii=False)
    call = CheckedCall(
        call_id=f"{CALL_ID_PREFIX}{serial}",
        name="bash",
        raw_arguments=raw,
        args=args,
        history_arguments=raw,
        tool=tool,
    )
    results: list[str] = []
    refused = False

    def record(_call: CheckedCall, text: str, /, unfinished: bool = False) -> None:
        results.append(text)

    yield ToolCallStarted(call_id=call.call_id, name="bash", arguments=args, raw_arguments=raw)
    async for event in execute_call(
        call,
        permissions=permissions,
        ctx=ctx,
        undo_store=None,
        turn=0,
        snapshot_done=True,
        ask=ask,
        record=record,
    ):
        if isinstance(event, ApprovalResolved) and not event.approved:
            refused = True
        yield event
    text = results[0] if results else "error: the command ended without a result"
    if refused or text.startswith(("refused:", "the user declined")):
        yield Notice(
            message=f"!{command} was not run: {text}; nothing goes to the model",
            code="user_shell_refused",
        )
        return
    pending.append(context_text(command, text))
    yield Notice(message=f"!{command}: its output goes with your next message", code="user_shell")
