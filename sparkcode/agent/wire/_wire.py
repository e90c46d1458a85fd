"""The OpenAI chat-completions stream frames, decoded with msgspec.

Typed msgspec structs decode a frame several times faster than ``json.loads``
into dicts, which keeps the client path close to bare line iteration. Unknown
fields are ignored, so any OpenAI-compatible server's extras pass through.
The structs hold no cycles, so they are kept out of the cyclic garbage
collector (``gc=False``): a long stream allocates hundreds of thousands.
"""

from __future__ import annotations

from typing import Any

import msgspec


class FunctionDelta(msgspec.Struct, omit_defaults=True, gc=False):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(msgspec.Struct, omit_defaults=True, gc=False):
    index: int = 0
    id: str | None = None
    function: FunctionDelta | None = None


class Delta(msgspec.Struct, omit_defaults=True, gc=False):
    content: str | None = None
    reasoning: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class Choice(msgspec.Struct, omit_defaults=True, gc=False):
    delta: Delta | None = None
    finish_reason: str | None = None
    token_ids: list[int] | None = None
    """vLLM's ``return_token_ids``: the tokens of this frame, also when its tool
    parser held the text back (the frame's delta is then empty)."""


class Usage(msgspec.Struct, omit_defaults=True, gc=False):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    completion_tokens_details: dict[str, Any] | None = None
    prompt_tokens_details: dict[str, Any] | None = None


class Frame(msgspec.Struct, omit_defaults=True, gc=False):
    """One ``data:`` payload of the stream."""

    choices: list[Choice] = []
    usage: Usage | None = None
    error: Any = None


FRAME_DECODER = msgspec.json.Decoder(Frame)
"""Decodes one frame, or with ``decode_lines`` all the frames of one read."""
