"""When and how the agent compacts its history (automatic at the threshold, forced
when the server says the context overflowed, or ``/compact [focus]``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from ..tools import TodoList
from .context import ContextMeter, Message, compact, estimate_tokens, last_user_index
from .events import ContextCompacted, Event, Notice
from .rewind import Rewind
from .settings import AgentSettings


class Compactable(Protocol):
    """What compaction reads and replaces of the agent (``loop.Agent``), named here so
    this module does not import the loop that calls it."""

    settings: AgentSettings
    history: list[Message]
    context: ContextMeter
    todos: TodoList
    rewind: Rewind
    turns: int

    async def summarise(self, messages: list[Message]) -> str: ...


async def compact_when_needed(
    agent: Compactable, *, force: bool = False, focus: str = "", whole: bool = False
) -> AsyncIterator[Event]:
    """Compact ``agent``'s history when it passes ``compact_threshold`` of the context
    (or ``force``); ``whole`` summarises the last turn too (between turns only).

    The open todo list is appended to the summary word for word: a plan the model
    is carrying out must survive the summary it writes itself.
    """
    limit = agent.settings.context_limit
    if not limit and not force:
        return
    used = agent.context.estimate(agent.history)
    if not force and used < agent.settings.compact_threshold * (limit or 0):
        return
    limit = limit or used
    todos = agent.todos
    footer = (
        "The todo list, still open:\n" + todos.render()
        if any(item.status != "done" for item in todos.items)
        else ""
    )
    new, count = await compact(
        agent.history,
        agent.summarise,
        limit_chars=limit * 2,
        keep_turn=not whole,
        focus=focus,
        footer=footer,
    )
    if count == 0:
        what = (
            "nothing to compact yet: the conversation is empty"
            if whole
            else (
                f"the context is nearly full ({used} of {limit} tokens) and there is nothing "
                "older to compact; consider /clear"
            )
        )
        yield Notice(message=what, code="context_full" if not whole else "nothing_to_compact")
        return
    agent.history = new
    if whole:
        agent.rewind.reset()  # no turn is left whole to take back
    else:
        agent.rewind.compacted(agent.turns, last_user_index(new))
    after = estimate_tokens(new)
    agent.context = ContextMeter(limit=limit)
    yield ContextCompacted(
        tokens_before=used, tokens_after_estimate=after, messages_summarised=count
    )
