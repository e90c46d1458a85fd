"""What a finished reply asks the agent to do: its tool calls, checked against the tools.

The server's parsed calls come first. With none: in small-model mode the reply
is one JSON step (``_structured``), a call or the answer (of an answer step cut
short, the part it began); otherwise a call the server's parser did not return
is recovered from the text (``_salvage``), and an attempt that cannot be read
becomes a call whose result says what was wrong.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..scaffold.salvage import Outcome, recover
from ..scaffold.step_text import StepText
from ..scaffold.structured import read_step
from ..tools import ToolRegistry
from ..wire.client import ChatClient, ChatResult, ToolCall
from .calls import CheckedCall, check_call
from .events import Notice


@dataclass
class Reply:
    calls: list[CheckedCall]
    answer: str
    """The reply's answer text (a structured step's ``answer``, salvaged text cut)."""
    said: str
    """The assistant message's content as it stays in the history."""
    notice: Notice | None = None
    """Said when a call was salvaged or found unreadable."""


async def read_reply(
    result: ChatResult,
    tools: ToolRegistry,
    client: ChatClient,
    *,
    structured: bool,
    salvage: bool,
    stamp: str,
) -> Reply:
    """The calls of ``result``; ``stamp`` (turn_request) makes their ids unique."""
    calls = [check_call(c, tools) for c in result.tool_calls]
    answer = said = result.content
    step = read_step(answer) if structured and not calls else None
    if step is not None:
        # The step stays in the history as written (well-formed by construction).
        if step.answer is not None:
            answer = step.answer
        else:
            calls = [
                check_call(
                    ToolCall(
                        index=0, id=f"step_{stamp}", name=step.tool or "", arguments=step.arguments
                    ),
                    tools,
                )
            ]
        return Reply(calls, answer, said)
    if structured and not calls:
        begun = StepText.read(answer)
        if begun.is_answer:  # an answer step cut short (output limit, a stopped stream)
            return Reply(calls, begun.shown, said)
    if calls or not salvage or result.cut:
        return Reply(calls, answer, said)
    hidden = None
    if result.hidden_token_ids and not result.content.strip():
        hidden = await client.detokenize(result.hidden_token_ids)
    found = recover(result.content, result.reasoning, hidden, tools)
    if found is None:
        return Reply(calls, answer, said)
    notice = Notice(
        message=found.notice(), code="tool_call_salvaged" if found.calls else "tool_call_unreadable"
    )
    return Reply(salvaged_calls(found, stamp, tools), found.content, found.content, notice)


def salvaged_calls(found: Outcome, stamp: str, tools: ToolRegistry) -> list[CheckedCall]:
    checked = [
        check_call(
            ToolCall(index=i, id=f"salvaged_{stamp}_{i}", name=c.name, arguments=c.arguments), tools
        )
        for i, c in enumerate(found.calls)
    ]
    for j, bad in enumerate(found.unreadable, len(checked)):
        checked.append(
            CheckedCall(
                call_id=f"salvaged_{stamp}_{j}",
                name=bad.name or "invalid",
                raw_arguments="",
                args={},
                history_arguments="{}",
                error=f"{bad.problem}; nothing was run. Call the tool again, well-formed",
            )
        )
    return checked


def empty_answer_note(completion_tokens: int) -> str:
    """Why a turn ended with neither text nor a tool call, and what to do."""
    if completion_tokens <= 0:
        return "the model returned an empty answer; send a message to retry"
    return (
        f"the model generated {completion_tokens} tokens but the server streamed no text "
        "and no tool call (a server-side tool-call parser drops a call it cannot parse, "
        "as vLLM's does when streaming); nothing was done: retry, or rephrase"
    )
