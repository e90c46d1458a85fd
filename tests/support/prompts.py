"""Render a request body to the prompt text vLLM would, through a real chat template.

:func:`render_prompt` takes the JSON body sparkcode sent and does what vLLM 0.32's
chat path does before the template: the body is validated as vLLM's own
``ChatCompletionRequest`` (which renames ``reasoning_content`` to ``reasoning``),
its ``build_chat_params`` gives the template's variables (``reasoning_effort``,
``enable_thinking`` from it unless ``chat_template_kwargs`` says it, those kwargs),
the tools are its ``model_dump()`` (``renderers/online_renderer.py``), and the
messages go through vLLM's ``_postprocess_messages`` (tool-call arguments parsed to
objects); the parser keeps ``reasoning_content`` beside ``reasoning`` for templates
(``renderers/chat_utils.py``). Then transformers' ``apply_chat_template`` renders.

Importing vLLM's protocol takes about 10 s here, so tests import this lazily.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
GLM_TEMPLATE = Path(__file__).with_name("glm53_chat_template.jinja")
"""Reconstructed from the notes, not the official file (its header says what it keeps)."""
QWEN_TEMPLATE = ROOT / "engine" / "modeldata" / "qwen2.5-coder-chat-template.jinja"
"""The official Qwen2.5-Coder template the cpu-coder profiles install."""
SPECIAL_TOKENS = [
    "<pad>",
    "<|im_start|>",
    "<|im_end|>",
    "[gMASK]",
    "<sop>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
    "<tool_response>",
    "</tool_response>",
]


def template_tokenizer(template: Path) -> Any:
    """A small locally trained BPE tokenizer (the templates' special tokens kept whole)
    that renders with ``template``."""
    from transformers import PreTrainedTokenizerFast

    from tests.support.tiny_models import stdlib_sources, train_bpe

    tok = train_bpe(stdlib_sources(60_000), 600, SPECIAL_TOKENS)
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<pad>",
        unk_token=None,
    )
    fast.chat_template = template.read_text(encoding="utf-8")
    return fast


def render_prompt(tokenizer: Any, body: dict[str, Any], *, generation: bool = True) -> str:
    """The prompt vLLM renders for ``body``; ``generation=False``: without the
    generation prompt (the conversation as the next request will carry it)."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.renderers.chat_utils import _postprocess_messages

    body = copy.deepcopy(body)
    request = ChatCompletionRequest(**copy.deepcopy(body))
    kwargs = dict(request.build_chat_params(None, "auto").chat_template_kwargs)
    kwargs["add_generation_prompt"] = generation
    tools = [tool.model_dump() for tool in request.tools] if request.tools else None
    messages = body["messages"]
    for message in messages:
        if message.get("reasoning_content") is not None:
            message["reasoning"] = message["reasoning_content"]
    _postprocess_messages(messages)
    text = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, **kwargs)
    assert isinstance(text, str)
    return text


def common_prefix(a: str, b: str) -> int:
    """How many leading characters ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
