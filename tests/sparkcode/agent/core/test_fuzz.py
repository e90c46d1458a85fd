"""Fuzzing (hypothesis): the SSE reader and tool-call salvage never crash, and every
rejection is a clear message."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkcode.agent.scaffold.salvage import salvage
from sparkcode.agent.tools import default_tools
from sparkcode.agent.wire.client import ChatClient, ChatError, ChatResult, EngineGone

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TOOLS = default_tools()


def read(pieces: list[bytes]) -> ChatResult:
    async def handler(request: httpx.Request) -> httpx.Response:
        async def body() -> AsyncIterator[bytes]:
            for piece in pieces:
                yield piece

        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body())

    async def main() -> ChatResult:
        client = ChatClient("http://fuzz.test/v1", "m", transport=httpx.MockTransport(handler))
        try:
            async with client.stream_chat([{"role": "user", "content": "x"}]) as stream:
                async for _ in stream:
                    pass
            return stream.result()
        finally:
            await client.aclose()

    return asyncio.run(main())


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, last = [], 0
    for p in points:
        out.append(data[last:p])
        last = p
    out.append(data[last:])
    return [p for p in out if p]


DELTA = st.fixed_dictionaries(
    {}, optional={"content": st.text(max_size=12), "reasoning": st.text(max_size=12)}
)


@FUZZ
@given(
    deltas=st.lists(DELTA, max_size=30),
    cuts=st.lists(st.integers(0, 10**6), max_size=20),
    crlf=st.booleans(),
    done=st.booleans(),
    token_ids=st.booleans(),
)
def test_any_split_of_a_valid_stream_reads_the_same(
    deltas: list[dict[str, str]], cuts: list[int], crlf: bool, done: bool, token_ids: bool
) -> None:
    frames = []
    for n, delta in enumerate(deltas, 1):
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": None}
        if token_ids:
            choice["token_ids"] = [n]
        frames.append({"choices": [choice], "usage": {"prompt_tokens": 3, "completion_tokens": n}})
    frames.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    nl = b"\r\n" if crlf else b"\n"
    data = b"".join(b"data: " + json.dumps(f).encode() + nl + nl for f in frames)
    if done:
        data += b"data: [DONE]" + nl + nl
    result = read(split(data, cuts))
    assert result.content == "".join(d.get("content", "") for d in deltas)
    assert result.reasoning == "".join(d.get("reasoning", "") for d in deltas)
    assert result.finish_reason == "stop" and not result.cut


SSE_BITS = st.sampled_from(
    [
        b"data: ",
        b"{",
        b"}",
        b'"choices"',
        b":",
        b"[",
        b"]",
        b"\n",
        b"\r\n",
        b"\n\n",
        b"[DONE]",
        b'"delta"',
        b'"content"',
        b'"x"',
        b",",
        b"event: x",
        b": comment",
        b"\xff",
        b'"usage"',
        b"0",
        b'"finish_reason"',
        b'"stop"',
        b'"error"',
        b'"tool_calls"',
    ]
)


@FUZZ
@given(
    parts=st.lists(st.one_of(SSE_BITS, st.binary(max_size=8)), max_size=60),
    cuts=st.lists(st.integers(0, 10**6), max_size=10),
)
def test_garbage_streams_end_in_a_result_or_a_clear_error(
    parts: list[bytes], cuts: list[int]
) -> None:
    data = b"".join(parts)
    try:
        read(split(data, cuts))
    except (ChatError, EngineGone) as exc:
        assert str(exc).strip(), "an empty error message"


CALL_BITS = st.sampled_from(
    [
        "<tool_call>",
        "</tool_call>",
        "<arg_key>",
        "</arg_key>",
        "<arg_value>",
        "</arg_value>",
        "{",
        "}",
        "[",
        "]",
        '"name"',
        '"arguments"',
        '"parameters"',
        ":",
        ",",
        '"read_file"',
        '"write_file"',
        "write_file",
        "read_file",
        '"path"',
        '"a.py"',
        "path",
        "a.py",
        "```json",
        "```",
        "\n",
        " ",
        "'",
        '"',
        "\\",
        "true",
        "null",
        "1",
        '{"function": ',
        "<|im_end|>",
    ]
)


@FUZZ
@given(parts=st.lists(st.one_of(CALL_BITS, st.text(max_size=6)), max_size=60))
def test_salvage_never_crashes_and_explains_every_rejection(parts: list[str]) -> None:
    found = salvage("".join(parts), TOOLS)
    for call in found.calls:
        tool = TOOLS.get(call.name)
        assert tool is not None
        assert isinstance(json.loads(call.arguments), dict)
    for bad in found.unreadable:
        assert len(bad.problem) > 20 and bad.problem[0].islower()


def test_deeply_nested_text_is_refused_not_a_crash() -> None:
    deep = "[" * 100_000
    found = salvage(f'<tool_call>{{"name": "bash", "arguments": {deep}</tool_call>{deep}', TOOLS)
    assert not found.calls and found.unreadable
