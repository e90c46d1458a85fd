"""One model request: its parameters, its stream, and what watching the stream decides.

:class:`Request` streams one chat completion and turns the deltas into events
(reasoning, answer text, usage at most every ``usage_interval_s``). While it
streams it closes the stream early when the thinking runs past its budget
(plus margin) before any answer, when the degeneration detector fires in
``stop`` mode, or when the turn is cancelled; the result is kept either way.
In small-model mode the answer text is the step's decoded ``answer``
(``step_text``); the detector still watches the text the model wrote.
What to do with the result is the turn's business (``_turn.py``).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from ..scaffold.step_text import StepText
from ..wire.client import ChatClient, ChatError, ChatResult
from ..wire.stream_idle import idle_timeout_s
from .context import Message
from .effort import effort_params, placement
from .events import ContentDelta, DegenerationDetected, Event, Notice, ReasoningDelta, UsageUpdate
from .settings import AgentSettings
from .watch import StreamWatch


def request_params(
    settings: AgentSettings,
    sampling: dict[str, Any],
    *,
    thinking_closed: bool,
    prompt_estimate: int,
    pinned_effort: str | None = None,
) -> dict[str, Any]:
    """The body fields of one request besides messages and tools. ``pinned_effort``:
    the conversation's first effort, which a pinned placement (``effort.py``) keeps
    sending so that the template renders the same prefix."""
    s = settings
    params: dict[str, Any] = {"max_tokens": s.max_tokens, **sampling}
    if s.salvage_calls and prompt_estimate < s.held_back_max_prompt:
        params["return_token_ids"] = True
    params.update(
        effort_params(
            placement(s.effort_placement),
            pinned_effort,
            s.reasoning_effort,
            thinking_closed=thinking_closed,
        )
    )
    if not thinking_closed and s.thinking_token_budget >= 0:
        # A sampling parameter, not rendered in the prompt: free to change.
        params["thinking_token_budget"] = s.thinking_token_budget
    return params


def context_overflow(exc: BaseException) -> bool:
    """HTTP 400 saying the prompt does not fit (vLLM, OpenAI and llama.cpp wordings)."""
    text = str(exc).lower()
    return (
        isinstance(exc, ChatError)
        and exc.status == 400
        and (
            "context length" in text
            or "context window" in text
            or "maximum context" in text
            or "too many tokens" in text
            or "exceeds the available context" in text
        )
    )


def usage_event(stats: Any, context_limit: int | None, *, final: bool) -> UsageUpdate:
    return UsageUpdate(
        prompt_tokens=stats.prompt_tokens,
        completion_tokens=stats.completion_tokens,
        reasoning_tokens=stats.reasoning_tokens,
        ttft_s=stats.ttft_s,
        decode_tok_s=stats.decode_tok_s,
        prefill_tok_s=stats.prefill_tok_s,
        context_used=stats.prompt_tokens + stats.completion_tokens,
        context_limit=context_limit,
        cached_tokens=stats.cached_tokens,
        final=final,
    )


class Request:
    """One streamed request; after :meth:`events` ends (or raises), :attr:`result`
    holds what arrived and :attr:`degenerate` what the detector said, if it fired."""

    def __init__(
        self,
        client: ChatClient,
        settings: AgentSettings,
        history: list[Message],
        *,
        tools: list[dict[str, Any]],
        choice: Any,
        params: dict[str, Any],
        thinking_closed: bool,
        cancelled: Callable[[], bool],
        structured: bool = False,
        prompt_estimate: int = 0,
    ) -> None:
        self.client = client
        self.settings = settings
        self.history = history
        self.tools = tools
        self.choice = choice
        self.params = params
        self.cancelled = cancelled
        self.prompt_estimate = prompt_estimate
        """The prompt's estimated tokens: what the stream's silence limit allows for."""
        s = settings
        self.budget = (
            s.thinking_token_budget
            if not thinking_closed and s.thinking_token_budget >= 0
            else None
        )
        self.result: ChatResult | None = None
        self.degenerate: DegenerationDetected | None = None
        self.steps = StepText() if structured else None
        """Small-model mode: what of each JSON step the user sees."""
        self._watch = StreamWatch(settings.degenerate)

    @property
    def stopped_degenerate(self) -> bool:
        """The stream was closed on the detector's verdict."""
        return self.degenerate is not None and self.degenerate.stopped

    @property
    def shown(self) -> str:
        """The answer text its :class:`ContentDelta` events carried."""
        if self.steps is not None:
            return self.steps.shown
        return self.result.content if self.result is not None else ""

    async def events(self) -> AsyncIterator[Event]:
        s = self.settings
        budget = self.budget
        limit = budget + max(s.budget_margin, 0) if budget is not None else None
        idle = idle_timeout_s(
            s.stream_idle_timeout_s, self.client.prefill.tok_s, self.prompt_estimate
        )
        stream = self.client.stream_chat(
            self.history,
            tools=self.tools,
            tool_choice=self.choice,
            params=self.params,
            idle_timeout_s=idle,
        )
        last_usage = 0.0
        try:
            async with stream:
                for note in stream.notices:
                    yield Notice(message=note, code="request_field_dropped")
                stats = stream.stats
                answered = False
                async for delta in stream:
                    if delta.reasoning:
                        yield ReasoningDelta(
                            text=delta.reasoning,
                            tokens_so_far=stats.reasoning_tokens,
                            budget=budget,
                        )
                    if delta.content:
                        answered = True
                        text = (
                            delta.content if self.steps is None else self.steps.feed(delta.content)
                        )
                        if text:
                            yield ContentDelta(text=text)
                    if delta.tool_calls:
                        answered = True
                    if delta.usage and time.monotonic() - last_usage >= s.usage_interval_s:
                        last_usage = time.monotonic()
                        yield usage_event(stream.stats, s.context_limit, final=False)
                    if self._watch.watching:
                        fired = self._watch.feed(delta.content, delta.reasoning)
                        if fired is not None:
                            self.degenerate = fired
                            yield fired
                            if fired.stopped:
                                break
                    if self.cancelled():
                        break
                    if limit is not None and not answered and stats.reasoning_tokens > limit:
                        break
        finally:
            self.result = stream.result()
        rest = self.steps.finish() if self.steps is not None else ""
        if rest:
            yield ContentDelta(text=rest)
        yield usage_event(stream.stats, s.context_limit, final=True)
