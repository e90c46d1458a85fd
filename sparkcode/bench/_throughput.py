"""Decode and prefill speed from exact token counts (see docs/bench.md).

Decode: one streamed chat request per run through the agent's own client;
tokens are the server's ``usage`` (continuous usage stats), never SSE frames;
the rate is (tokens at the last token - tokens in the first frame) / (last
token time - first token time). The count is checked against the final usage
frame of the raw body. Prefill: a completion with a prompt of exactly N tokens
(bisection with ``/tokenize``), a fresh ``cache_salt`` so nothing is cached,
one output token; rate = prompt tokens / TTFT. Turn: what an agent's next
request costs, the conversation so far (N tokens, sent once unmeasured under a
fresh salt) plus ``turn_tokens`` new ones under the same salt; its TTFT against the
cold TTFT at N is what prefix caching saves (cached tokens from ``usage`` where the
server reports them, else the ``/metrics`` prefix-cache hits). Speculative
acceptance comes from ``/metrics`` deltas around each run, which the idle check
keeps to that run alone.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator
from typing import Any

import httpx

from engine.errors import UserError
from sparkcode.agent.wire.client import ChatClient, ChatError
from sparkcode.agent.wire.metrics import (
    ACCEPTED,
    DRAFT_TOKENS,
    DRAFTS,
    PREFIX_HITS,
    acceptance_per_position,
)
from sparkcode.sessions import parse_output

from ._http import Server
from ._run import Bar, Context
from ._texts import code_text, exact_prefix, prose_text

PROMPTS = {
    "code": (
        "Write a complete Python module implementing a thread-safe LRU cache with "
        "time-based expiry: the class, its methods with docstrings and type hints, and "
        "a full set of unittest tests. Output only the code."
    ),
    "prose": (
        "Write a long, detailed essay on the history of the printing press and how it "
        "changed science, religion and politics in Europe. Use several paragraphs."
    ),
}


class _Tee(httpx.AsyncBaseTransport):
    """Keeps the raw bytes of the last response (for the final-usage check)."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.body = bytearray()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        self.body = bytearray()
        body = self.body
        stream = response.stream
        assert isinstance(stream, httpx.AsyncByteStream)

        async def tee() -> AsyncIterator[bytes]:
            async for chunk in stream:
                body.extend(chunk)
                yield chunk

        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_Stream(tee(), stream),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


class _Stream(httpx.AsyncByteStream):
    def __init__(self, it: AsyncIterator[bytes], inner: httpx.AsyncByteStream) -> None:
        self._it = it
        self._inner = inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._it:
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


def _spec(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, Any] | None:
    if before is None or after is None or DRAFTS not in after:
        return None
    drafts = after.get(DRAFTS, 0.0) - before.get(DRAFTS, 0.0)
    accepted = after.get(ACCEPTED, 0.0) - before.get(ACCEPTED, 0.0)
    draft_tokens = after.get(DRAFT_TOKENS, 0.0) - before.get(DRAFT_TOKENS, 0.0)
    per_pos = acceptance_per_position(before, after)
    return {
        "drafts": drafts,
        "draft_tokens": draft_tokens,
        "accepted": accepted,
        "acceptance_length": 1.0 + accepted / drafts if drafts else None,
        "per_position": list(per_pos) if per_pos else None,
    }


def plan(settings: dict[str, Any]) -> list[str]:
    keys = []
    for kind in settings["kinds"]:
        keys += [f"decode:{kind}:{i}" for i in range(settings["repeats"])]
    for length in settings["prefill_lengths"]:
        keys += [f"prefill:{length}:{i}" for i in range(settings["repeats"])]
    if settings.get("turn_tokens"):
        for length in settings["prefill_lengths"]:
            keys += [f"turn:{length}:{i}" for i in range(settings["repeats"])]
    return keys


async def _decode(
    ctx: Context, server: Server, client: ChatClient, tee: _Tee, kind: str, max_tokens: int
) -> dict[str, Any]:
    idle = await server.wait_idle()
    before = await server.metrics()
    params: dict[str, Any] = {
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "cache_salt": secrets.token_hex(8),
        "reasoning_effort": "none",
    }
    if ctx.settings["fixed_length"]:
        params["min_tokens"] = max_tokens
    messages = [{"role": "user", "content": PROMPTS[kind]}]
    try:
        async with client.stream_chat(messages, params=params) as stream:
            async for _ in stream:
                pass
    except ChatError as exc:
        raise UserError(f"{ctx.label}: decode run: {exc}") from None
    after = await server.metrics()
    stats = stream.stats
    final = parse_output(bytes(tee.body), streamed=True)
    final_tokens = final.completion_tokens
    if not stats.usage_seen or final_tokens is None:
        raise UserError(
            f"{ctx.label} sent no usage in its stream: exact token counts need "
            "stream_options.include_usage (and continuous_usage_stats)"
        )
    span = (
        None
        if stats.first_token is None or stats.last_token is None
        else stats.last_token - stats.first_token
    )
    return {
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.completion_tokens,
        "final_usage_completion_tokens": final_tokens,
        "tokens_in_first_frame": stats.tokens_at_first,
        "frames": stats.frames,
        "ttft_s": stats.ttft_s,
        "decode_span_s": span,
        "decode_tok_s": stats.decode_tok_s,
        "finish_reason": final.finish_reason,
        "idle_check": idle,
        "spec": _spec(before, after),
        "host_load_1m": _load(),
        "dropped_fields": sorted(client.dropped),
    }


async def _prefill(ctx: Context, server: Server, prompt: str, tokens: int) -> dict[str, Any]:
    idle = await server.wait_idle()
    timed = await server.timed_completion(
        {"prompt": prompt, "max_tokens": 1, "temperature": 0.0, "cache_salt": secrets.token_hex(8)}
    )
    usage = timed.usage or {}
    prompt_tokens = usage.get("prompt_tokens")
    if prompt_tokens != tokens:
        raise UserError(
            f"{ctx.label}: the prompt cut to {tokens} tokens by /tokenize was "
            f"billed as {prompt_tokens} prompt tokens: the tokenizer endpoint and "
            "the completion disagree"
        )
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    ttft = timed.ttft_s
    return {
        "prompt_tokens": prompt_tokens,
        "cached_tokens": cached,
        "ttft_s": ttft,
        "prefill_tok_s": prompt_tokens / ttft if ttft else None,
        "idle_check": idle,
        "host_load_1m": _load(),
    }


async def _turn(
    ctx: Context, server: Server, before: list[int], prompt: list[int], tokens: int
) -> dict[str, Any]:
    """``before`` (the conversation so far) once to fill the cache, then ``prompt``
    (it plus the turn's new tokens) timed, both under one fresh salt."""
    salt = secrets.token_hex(8)
    await server.wait_idle()
    await server.timed_completion(
        {"prompt": before, "max_tokens": 1, "temperature": 0.0, "cache_salt": salt}
    )
    idle = await server.wait_idle()
    scrape = await server.metrics()
    timed = await server.timed_completion(
        {"prompt": prompt, "max_tokens": 1, "temperature": 0.0, "cache_salt": salt}
    )
    after = await server.metrics()
    usage = timed.usage or {}
    if usage.get("prompt_tokens") != tokens:
        raise UserError(
            f"{ctx.label}: a turn of {tokens} prompt tokens was billed as "
            f"{usage.get('prompt_tokens')}"
        )
    hits = (
        None
        if scrape is None or after is None or PREFIX_HITS not in after
        else after[PREFIX_HITS] - scrape.get(PREFIX_HITS, 0.0)
    )
    return {
        "prompt_tokens": tokens,
        "ttft_s": timed.ttft_s,
        "cached_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens"),
        "prefix_cache_hits": hits,
        "idle_check": idle,
        "host_load_1m": _load(),
    }


def _load() -> float:
    """This machine's 1-minute load average: the idle check sees the engine's own
    requests, not other processes competing for the cores a local engine runs on."""
    return round(os.getloadavg()[0], 2)


def _skip(ctx: Context, bar: Bar, wanted: list[str], anyway: bool = False) -> bool:
    """Advance the bar past ``wanted`` when they are all done (or ``anyway``)."""
    if anyway or all(ctx.result.done(ctx.label, k) for k in wanted):
        for _ in wanted:
            bar.advance()
        return True
    return False


def _text(ctx: Context) -> str:
    return code_text() if ctx.settings["prefill_text"] == "code" else prose_text()


async def _prefills(ctx: Context, server: Server, bar: Bar, skipped: dict[str, str]) -> None:
    """Cold prefill at each length, up to the target's context (``skipped`` says where
    a length was cut or measured already)."""
    s = ctx.settings
    limit = ctx.target.max_model_len
    measured: set[int] = set()
    for length in s["prefill_lengths"]:
        wanted = [f"prefill:{length}:{i}" for i in range(s["repeats"])]
        tokens = length
        if limit is not None and length + 1 > limit:
            # Up to the target's context: one output token must still fit.
            tokens = limit - 1
            skipped[str(length)] = (
                f"{length} tokens do not fit max_model_len {limit}: measured at {tokens}"
            )
        if tokens in measured:
            skipped[str(length)] = f"same as {tokens} (max_model_len {limit})"
        seen = tokens in measured
        measured.add(tokens)
        if _skip(ctx, bar, wanted, anyway=seen):
            continue
        prompt, got, calls = await exact_prefix(_text(ctx), tokens, server.count)
        if got != tokens:
            raise UserError(
                f"{ctx.label}: no prefix of the text is exactly {tokens} tokens (closest {got})"
            )
        await server.timed_completion(
            {"prompt": prompt[:2000], "max_tokens": 1, "cache_salt": secrets.token_hex(8)}
        )
        for key in wanted:
            if not ctx.result.done(ctx.label, key):
                unit = await _prefill(ctx, server, prompt, tokens)
                unit["tokenize_calls"] = calls
                ctx.result.put(ctx.label, key, unit)
            bar.advance()


async def _turns(ctx: Context, server: Server, bar: Bar, skipped: dict[str, str]) -> None:
    """A turn after a cached history at each prefill length (``--turn-tokens``)."""
    s = ctx.settings
    limit = ctx.target.max_model_len
    turn = s.get("turn_tokens") or 0
    measured: set[int] = set()
    for length in s["prefill_lengths"] if turn else []:
        wanted = [f"turn:{length}:{i}" for i in range(s["repeats"])]
        tokens = length if limit is None else min(length, limit - 1 - turn)
        if tokens < 1:
            skipped[f"turn {length}"] = (
                f"a turn of {turn} tokens does not fit max_model_len {limit}"
            )
        elif tokens != length:
            skipped[f"turn {length}"] = (
                f"{length} + {turn} tokens do not fit max_model_len {limit}: measured at {tokens}"
            )
        seen = tokens in measured
        measured.add(tokens)
        if _skip(ctx, bar, wanted, anyway=tokens < 1 or seen):
            continue
        # Token ids, not text: the turn extends the history token for token, as an
        # agent's next request extends its conversation.
        base = text = _text(ctx)
        ids = await server.tokenize(text)
        while len(ids) < tokens + turn:
            text += "\n\n" + base
            ids = await server.tokenize(text)
        history, extended = ids[:tokens], ids[: tokens + turn]
        for key in wanted:
            if not ctx.result.done(ctx.label, key):
                unit = await _turn(ctx, server, history, extended, tokens + turn)
                unit["history_tokens"] = tokens
                ctx.result.put(ctx.label, key, unit)
            bar.advance()


async def run(ctx: Context) -> None:
    s = ctx.settings
    keys = plan(s)
    bar = ctx.bar("throughput", keys)
    tee = _Tee()
    client = ChatClient(
        ctx.target.base_url, ctx.target.model, ctx.target.api_key_env, transport=tee
    )
    async with Server(ctx.target) as server:
        try:
            # Warm-up (excluded): first requests pay for graph capture, allocator growth...
            if not all(ctx.result.done(ctx.label, k) for k in keys):
                await _decode(ctx, server, client, tee, s["kinds"][0], 16)
            for kind in s["kinds"]:
                for i in range(s["repeats"]):
                    key = f"decode:{kind}:{i}"
                    if not ctx.result.done(ctx.label, key):
                        ctx.result.put(
                            ctx.label,
                            key,
                            await _decode(ctx, server, client, tee, kind, s["decode_tokens"]),
                        )
                    bar.advance()
            skipped: dict[str, str] = {}
            await _prefills(ctx, server, bar, skipped)
            await _turns(ctx, server, bar, skipped)
            if skipped:
                ctx.result.set_target(ctx.label, skipped_prefill=skipped)
        finally:
            await client.aclose()
