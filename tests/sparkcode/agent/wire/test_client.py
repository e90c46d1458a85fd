"""ChatClient: SSE parsing, usage accounting, tool-call assembly, errors."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from sparkcode.agent.wire.client import ChatClient, ChatError, ChatResult, EngineGone


def chunk(
    delta: dict[str, Any], usage: tuple[int, int] | None = None, finish: str | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage:
        body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1]}
    return body


def sse(frames: list[dict[str, Any]], *, sep: bytes = b"\n", done: bool = True) -> bytes:
    out = b"".join(b"data: " + json.dumps(f).encode() + sep + sep for f in frames)
    return out + (b"data: [DONE]" + sep + sep if done else b"")


def client_for(
    payload: bytes,
    *,
    split: int | None = None,
    status: int = 200,
    seen: list[httpx.Request] | None = None,
    **kw: Any,
) -> ChatClient:
    async def pieces() -> AsyncIterator[bytes]:
        step = split or len(payload)
        for i in range(0, len(payload), step):
            yield payload[i : i + step]

    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        if status != 200:
            return httpx.Response(status, content=payload)
        return httpx.Response(200, content=pieces())

    return ChatClient("http://x.test/v1", "m", transport=httpx.MockTransport(handler), **kw)


async def collect(client: ChatClient) -> ChatResult:
    async with client.stream_chat([{"role": "user", "content": "hi"}]) as stream:
        async for _ in stream:
            pass
    return stream.result()


STREAM = [
    chunk({"role": "assistant"}, (10, 0)),
    chunk({"reasoning_content": "think"}, (10, 4)),
    chunk({"content": "Hé"}, (10, 7)),
    chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "a",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"pa'},
                }
            ]
        },
        (10, 9),
    ),
    chunk(
        {"tool_calls": [{"index": 1, "id": "b", "function": {"name": "grep", "arguments": "{}"}}]},
        (10, 10),
    ),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'th": "x"}'}}]}, (10, 12)),
    chunk({}, (10, 12), finish="tool_calls"),
]


@pytest.mark.parametrize("split", [None, 1, 7, 64])
@pytest.mark.parametrize("sep", [b"\n", b"\r\n"])
async def test_stream_assembles_whatever_the_chunking(split: int | None, sep: bytes) -> None:
    result = await collect(client_for(sse(STREAM, sep=sep), split=split))
    assert result.content == "Hé" and result.reasoning == "think"
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [
        ("a", "read_file", '{"path": "x"}'),
        ("b", "grep", "{}"),
    ]
    assert result.finish_reason == "tool_calls" and not result.cut
    stats = result.stats
    assert (stats.prompt_tokens, stats.completion_tokens, stats.reasoning_tokens) == (10, 12, 4)
    assert stats.ttft_s is not None and stats.ttft_s >= 0


async def test_comments_and_event_fields_are_ignored() -> None:
    payload = b": keep-alive\n\nevent: message\n" + sse(
        [chunk({"content": "ok"}, (1, 1)), chunk({}, (1, 1), "stop")]
    )
    assert (await collect(client_for(payload))).content == "ok"


async def test_without_usage_tokens_are_estimated_per_frame() -> None:
    frames = [
        chunk({"reasoning": "a"}),
        chunk({"reasoning": "b"}),
        chunk({"content": "c"}),
        chunk({}, finish="stop"),
    ]
    stats = (await collect(client_for(sse(frames)))).stats
    assert not stats.usage_seen and stats.completion_tokens == 3 and stats.reasoning_tokens == 2


async def test_request_asks_for_continuous_usage_and_sends_the_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MY_KEY", "sk-123")
    seen: list[httpx.Request] = []
    await collect(client_for(sse([chunk({}, (1, 0), "stop")]), seen=seen, api_key_env="MY_KEY"))
    body = json.loads(seen[0].content)
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert seen[0].headers["authorization"] == "Bearer sk-123"


async def test_missing_api_key_variable_is_named() -> None:
    client = client_for(b"", api_key_env="NOT_SET_ANYWHERE_42")
    with pytest.raises(ChatError, match="NOT_SET_ANYWHERE_42"):
        await collect(client)


async def test_http_error_message_is_surfaced() -> None:
    body = json.dumps({"error": {"message": "model 'x' not found"}}).encode()
    with pytest.raises(ChatError, match="HTTP 404 .*model 'x' not found") as info:
        await collect(client_for(body, status=404))
    assert info.value.status == 404


async def test_error_frame_mid_stream() -> None:
    payload = (
        sse([chunk({"content": "a"}, (1, 1))], done=False)
        + b'data: {"error": {"message": "engine overloaded"}}\n\n'
    )
    with pytest.raises(ChatError, match="engine overloaded"):
        await collect(client_for(payload))


async def test_stream_ending_early_is_engine_gone() -> None:
    payload = sse([chunk({"content": "a"}, (1, 1))], done=False)
    with pytest.raises(EngineGone, match="ended before the response was complete"):
        await collect(client_for(payload))


async def test_finish_without_done_marker_is_accepted() -> None:
    payload = sse([chunk({"content": "a"}, (1, 1)), chunk({}, (1, 1), "stop")], done=False)
    result = await collect(client_for(payload))
    assert result.content == "a" and not result.cut


async def test_list_models_reads_max_model_len() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"data": [{"id": "tiny", "max_model_len": 2048}]})

    client = ChatClient("http://x.test/v1", "", transport=httpx.MockTransport(handler))
    cards = await client.list_models()
    assert [(c.id, c.max_model_len) for c in cards] == [("tiny", 2048)]


@pytest.mark.parametrize("timeouts", [0, 2, 3])
async def test_list_models_tries_a_timed_out_connect_three_times(timeouts: int) -> None:
    tries: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        tries.append(1)
        if len(tries) <= timeouts:
            raise httpx.ConnectTimeout("timed out", request=request)
        return httpx.Response(200, json={"data": [{"id": "tiny"}]})

    client = ChatClient("http://x.test/v1", "", transport=httpx.MockTransport(handler))
    if timeouts < 3:
        assert [c.id for c in await client.list_models()] == ["tiny"]
        assert len(tries) == timeouts + 1
    else:
        with pytest.raises(EngineGone, match=r"cannot reach http://x.test/v1: .*\(3 tries\)"):
            await client.list_models()
        assert len(tries) == 3


async def test_list_models_does_not_retry_a_refused_connect() -> None:
    tries: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        tries.append(1)
        raise httpx.ConnectError("connection refused", request=request)

    client = ChatClient("http://x.test/v1", "", transport=httpx.MockTransport(handler))
    with pytest.raises(EngineGone, match="cannot reach http://x.test/v1"):
        await client.list_models()
    assert len(tries) == 1


async def test_rejected_tool_choice_falls_back_to_no_tool_parsing() -> None:
    calls: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        calls.append(body)
        if body.get("tool_choice") == "auto":
            return httpx.Response(
                400,
                json={
                    "error": {
                        "message": '"auto" tool choice requires '
                        "--enable-auto-tool-choice and "
                        "--tool-call-parser to be set"
                    }
                },
            )
        return httpx.Response(200, content=sse([chunk({"content": "ok"}, (1, 1), "stop")]))

    client = ChatClient("http://x.test/v1", "m", transport=httpx.MockTransport(handler))
    tools = [{"type": "function", "function": {"name": "t", "parameters": {}}}]
    async with client.stream_chat([], tools=tools, tool_choice="auto") as stream:
        async for _ in stream:
            pass
    assert stream.content == "ok" and "tool-call parser" in stream.notices[0]
    assert [c["tool_choice"] for c in calls] == ["auto", "none"]


async def test_last_event_without_blank_line_is_not_lost() -> None:
    payload = (
        sse([chunk({"content": "a"}, (1, 1))], done=False)
        + b"data: "
        + json.dumps(chunk({"content": "b"}, (1, 2), "stop")).encode()
        + b"\n"
    )
    result = await collect(client_for(payload))
    assert result.content == "ab" and result.finish_reason == "stop"


async def test_field_rejected_inside_a_200_stream_is_dropped_and_retried() -> None:
    """vLLM streams a validation error as the first SSE frame (status 200)."""
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        if "thinking_token_budget" in body:
            error = {
                "error": {
                    "message": "thinking_token_budget is set but reasoning_config "
                    "is not configured.",
                    "code": 400,
                }
            }
            return httpx.Response(
                200, content=b"data: " + json.dumps(error).encode() + b"\n\ndata: [DONE]\n\n"
            )
        return httpx.Response(200, content=sse([chunk({"content": "ok"}, (1, 1), "stop")]))

    client = ChatClient("http://x.test/v1", "m", transport=httpx.MockTransport(handler))
    async with client.stream_chat([], params={"thinking_token_budget": 8}) as stream:
        async for _ in stream:
            pass
    assert stream.content == "ok" and "thinking_token_budget" in stream.notices[0]
    assert len(bodies) == 2 and "thinking_token_budget" not in bodies[1]
    assert client.dropped == {"thinking_token_budget"}


TRICKY = ["data: [DONE]", '\n\ndata: {"x": 1}\n\n', "é→ü", "}\n\n", " \r\n ", "[DONE]"]


@pytest.mark.parametrize("split", [3, 13, 100, 4096])
async def test_text_that_looks_like_sse_framing_survives_any_chunking(split: int) -> None:
    # Event text that spells SSE syntax (escaped inside the JSON), cut at every
    # kind of boundary, including reads that end exactly on an event boundary.
    frames = [chunk({"content": TRICKY[i % len(TRICKY)]}, (5, i + 1)) for i in range(60)]
    frames.append(chunk({}, (5, 60), finish="stop"))
    result = await collect(client_for(sse(frames), split=split))
    assert result.content == "".join(TRICKY[i % len(TRICKY)] for i in range(60))
    assert result.stats.completion_tokens == 60 and result.finish_reason == "stop"
    assert not result.cut
