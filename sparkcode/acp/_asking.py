"""``ask_user`` over ACP (:mod:`sparkcode.agent.core.asking`): the model's question goes to
the editor.

A question with options is a ``session/request_permission`` whose permission options
are the answers (each ``allow_once``) and "Decline to answer" (``reject_once``),
tied to the ``ask_user`` tool call. A question without options needs a typed answer,
which only ACP's form elicitation (``elicitation/create``, unstable in the protocol)
can take: it is asked so when the editor advertised ``elicitation.form`` at
``initialize``; otherwise the model is told to ask again with options. Such an editor
also gets "Answer in my own words" beside the options, which opens the same form (the
TUI's card takes a typed answer too). A cancelled
turn, a cancelled request and an editor that fails to answer all decline.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any, TypeVar

from acp import Client, text_block, tool_content
from acp.schema import (
    AcceptElicitationResponse,
    AllowedOutcome,
    ElicitationFormSessionMode,
    ElicitationSchema,
    ElicitationStringPropertySchema,
    PermissionOption,
    ToolCallUpdate,
)

from sparkcode.agent.core.asking import Answer, Asker, Question

DECLINE = "decline"
OWN_WORDS = "own-words"
NO_TYPED_ANSWER = "this editor takes no typed answer over ACP (no form elicitation)"
ASK_WITH_OPTIONS = (
    "call ask_user again with options to pick from, or decide yourself and state the assumption"
)
T = TypeVar("T")
log = logging.getLogger(__name__)


def acp_asker(client: Client, session_id: str, cancelled: asyncio.Event, *, form: bool) -> Asker:
    """Asks the editor of ``session_id``; ``form``: it takes form elicitations."""

    async def ask(question: Question) -> Answer:
        if question.options:
            return await _pick(client, session_id, cancelled, question, form=form)
        if form:
            return await _typed(client, session_id, cancelled, question)
        return Answer.unavailable(NO_TYPED_ANSWER, ASK_WITH_OPTIONS)

    return ask


async def _pick(
    client: Client, session_id: str, cancelled: asyncio.Event, question: Question, *, form: bool
) -> Answer:
    options = [
        PermissionOption(option_id=f"answer-{n}", name=text, kind="allow_once")
        for n, text in enumerate(question.options, 1)
    ]
    if form:
        options.append(
            PermissionOption(option_id=OWN_WORDS, name="Answer in my own words", kind="allow_once")
        )
    options.append(
        PermissionOption(option_id=DECLINE, name="Decline to answer", kind="reject_once")
    )
    call = ToolCallUpdate(
        tool_call_id=question.call_id,
        title=f"The model asks: {question.text}",
        status="pending",
        content=[tool_content(text_block(question.text))],
    )
    answer = await _unless_cancelled(
        client.request_permission(session_id=session_id, tool_call=call, options=options), cancelled
    )
    outcome = answer.outcome if answer is not None else None
    if form and isinstance(outcome, AllowedOutcome) and outcome.option_id == OWN_WORDS:
        return await _typed(client, session_id, cancelled, question)
    if not isinstance(outcome, AllowedOutcome) or not outcome.option_id.startswith("answer-"):
        return Answer.declined()
    n = int(outcome.option_id.removeprefix("answer-"))
    if not 1 <= n <= len(question.options):
        return Answer.declined()
    return Answer.answered(question.options[n - 1])


async def _typed(
    client: Client, session_id: str, cancelled: asyncio.Event, question: Question
) -> Answer:
    schema = ElicitationSchema(
        properties={
            "answer": ElicitationStringPropertySchema(
                type="string", title="Answer", description="Your answer to the model's question"
            )
        },
        required=["answer"],
    )
    mode = ElicitationFormSessionMode(
        session_id=session_id, tool_call_id=question.call_id or None, requested_schema=schema
    )
    reply = await _unless_cancelled(
        client.create_elicitation(message=question.text, mode=mode), cancelled
    )
    if not isinstance(reply, AcceptElicitationResponse):
        return Answer.declined()
    text = (reply.content or {}).get("answer")
    return (
        Answer.answered(text.strip())
        if isinstance(text, str) and text.strip()
        else Answer.declined()
    )


async def _unless_cancelled(request: Awaitable[T], cancelled: asyncio.Event) -> T | None:
    """The editor's reply; None when the turn was cancelled first or the editor failed
    (the SDK drops a late reply)."""
    asking: asyncio.Future[T] = asyncio.ensure_future(request)
    waiting = asyncio.ensure_future(cancelled.wait())
    both: set[asyncio.Future[Any]] = {asking, waiting}
    try:
        await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        asking.cancel()
        raise
    finally:
        waiting.cancel()
    if not asking.done():
        asking.cancel()
        return None
    try:
        return asking.result()
    except Exception as exc:  # noqa: BLE001 - an editor error declines, as a refusal would
        log.warning("the editor did not answer ask_user: %s", exc)
        return None


def form_elicitation(client_capabilities: Any) -> bool:
    """Whether ``initialize``'s client capabilities offer form elicitation."""
    elicitation = getattr(client_capabilities, "elicitation", None)
    return getattr(elicitation, "form", None) is not None


__all__ = ["acp_asker", "form_elicitation"]
