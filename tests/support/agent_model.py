"""A tiny Llama trained to complete one agent task, for the real-engine e2e test.

A random model never calls a tool, so the e2e test serves one that has
memorised a single conversation: asked ``TASK_PROMPT`` with sparkcode's own
system prompt and tools (rendered by a hermes-style chat template), it emits
a ``<tool_call>`` for ``write_file``; once the tool result comes back it
answers ``FINAL_ANSWER``. The prompts are rendered here the way vLLM renders
the agent's requests (same messages, same tools, same template), and the
training prompts are randomly perturbed away from the tail, so small
differences in how the engine renders the system prompt or the tools do not
change the answer. Training took 64 s on two quiet cores (140 steps of 0.4 s, measured 2026-12-02).
"""

from __future__ import annotations

import asyncio
import copy
import fcntl
import json
import random
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkcode.agent import DEFAULT_SYSTEM_PROMPT
from sparkcode.agent.core.calls import check_call
from sparkcode.agent.lsp import Diagnostics, navigation_tools
from sparkcode.agent.tools import ToolContext, WriteFile, default_tools
from sparkcode.agent.wire.client import ToolCall
from sparkcode.config import Config
from tests.support.tiny_models import stdlib_sources, train_bpe

TASK_PROMPT = "Write a short note into NOTES.md."
NOTE_PATH = "NOTES.md"
NOTE_CONTENT = "# Notes\n\nWritten by sparkcode.\n"
FINAL_ANSWER = "Done: NOTES.md has the note."
GLM_PROMPT = "Save the note in GLM form."
"""A second task: the model answers it with a GLM-format call, which vLLM's
streaming hermes parser cannot read and so sends nothing of (salvage test)."""
GLM_PATH = "GLM.md"

SPECIAL_TOKENS = [
    "<pad>",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
]
PAD, BOS, EOS = 0, 1, 2

# Hermes (Qwen2.5-style) tool calling: tools in the system turn, calls as
# <tool_call>JSON</tool_call>, results as a user turn in <tool_response>. Each
# tool is rendered from its name, description and parameters only, so extra
# fields vLLM may add when it re-serialises the request (``strict``) do not
# change the prompt.
CHAT_TEMPLATE = (
    # No whitespace control and no newline right after a block tag:
    # transformers renders with trim_blocks, which would eat it.
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n\n{% endif %}"
    "# Tools\n\nYou are provided with function signatures within <tools></tools> XML tags:"
    "\n<tools>"
    "{% for tool in tools %}{% set f = tool['function'] %}{{ '\n' }}"
    "{{ {'name': f['name'], 'description': f['description'],"
    " 'parameters': f['parameters']} | tojson }}{% endfor %}"
    "{{ '\n' }}</tools>\n\nFor each function call, return a json object with function name "
    "and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
    "{% elif messages[0]['role'] == 'system' %}"
    "<|im_start|>system\n{{ messages[0]['content'] }}<|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}"
    "<|im_start|>user\n{{ message['content'] }}<|im_end|>\n"
    "{% elif message['role'] == 'assistant' %}"
    "<|im_start|>assistant\n{{ message['content'] or '' }}"
    "{% for call in message['tool_calls'] or [] %}{% set f = call['function'] %}"
    '<tool_call>\n{"name": "{{ f[\'name\'] }}", "arguments": '
    "{{ f['arguments'] if f['arguments'] is string else f['arguments'] | tojson }}{{ '}' }}"
    "\n</tool_call>{% endfor %}<|im_end|>\n"
    "{% elif message['role'] == 'tool' %}"
    "<|im_start|>user\n<tool_response>\n{{ message['content'] }}\n</tool_response><|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class Conversation:
    """The two requests of the task and what the model must answer to each."""

    tools: list[dict[str, Any]]
    first: list[dict[str, Any]]
    second: list[dict[str, Any]]
    call: str
    """The first answer: the hermes tool call, as text."""
    glm_first: list[dict[str, Any]]
    glm_call: str
    """The answer to ``GLM_PROMPT``: a write_file call in GLM's own format."""


def tool_arguments() -> dict[str, str]:
    return {"path": NOTE_PATH, "content": NOTE_CONTENT}


def _tool_result() -> str:
    """What the real write_file tool answers for the task's call."""
    with tempfile.TemporaryDirectory() as tmp:
        out = asyncio.run(WriteFile().run(tool_arguments(), ToolContext(workspace=Path(tmp))))
    return out.text


def conversation() -> Conversation:
    """The agent's two requests, built by the agent's own code where it matters:
    the history entry of the call comes from ``check_call`` (canonical, sorted
    JSON), the result from the real tool. vLLM turns the arguments string back
    into a dict before rendering, and so does this. The tools are the session's:
    the navigation tools too where a language server is installed, as the builder
    offers them (the model learnt the prompt without them and answered garbage)."""
    hub = Diagnostics(Config().diagnostics, Path.cwd())
    tools = default_tools(navigation=navigation_tools(hub))
    first = [
        {"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
        {"role": "user", "content": TASK_PROMPT},
    ]
    call = {"name": "write_file", "arguments": tool_arguments()}
    raw = json.dumps(call["arguments"], ensure_ascii=False)
    entry = check_call(
        ToolCall(index=0, id="call-0", name="write_file", arguments=raw), tools
    ).history_entry()
    entry["function"]["arguments"] = json.loads(entry["function"]["arguments"])
    second: list[dict[str, Any]] = [
        *first,
        {"role": "assistant", "content": "", "tool_calls": [entry]},
        {"role": "tool", "tool_call_id": "call-0", "content": _tool_result()},
    ]
    text = f"<tool_call>\n{json.dumps(call, ensure_ascii=False)}\n</tool_call>"
    glm_first = [first[0], {"role": "user", "content": GLM_PROMPT}]
    glm = (
        f"<tool_call>write_file\n<arg_key>path</arg_key>\n<arg_value>{GLM_PATH}</arg_value>"
        f"\n<arg_key>content</arg_key>\n<arg_value>{NOTE_CONTENT}</arg_value>\n</tool_call>"
    )
    return Conversation(
        tools=tools.specs(),
        first=first,
        second=second,
        call=text,
        glm_first=glm_first,
        glm_call=glm,
    )


def _corpus(conv: Conversation) -> list[str]:
    """The agent's own texts (many times, so they become few tokens) and some
    Python for general coverage."""
    specs = [
        json.dumps(
            {k: t["function"][k] for k in ("name", "description", "parameters")}, ensure_ascii=False
        )
        for t in conv.tools
    ]
    messages = [str(m["content"]) for m in conv.second]
    texts = [
        CHAT_TEMPLATE,
        *specs,
        *messages,
        conv.call,
        FINAL_ANSWER,
        GLM_PROMPT,
        conv.glm_call,
    ] * 20
    return texts + stdlib_sources(150_001)


def _build_tokenizer(out_dir: Path, conv: Conversation, vocab_size: int) -> Any:
    from transformers import PreTrainedTokenizerFast

    tok = train_bpe(_corpus(conv), vocab_size, SPECIAL_TOKENS)
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<pad>",
        unk_token=None,
        additional_special_tokens=SPECIAL_TOKENS[3:],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out_dir)
    return fast


def _ids(tok: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[int]:
    text = tok.apply_chat_template(
        messages, tools=tools, add_generation_prompt=True, tokenize=False
    )
    return list(tok(text, add_special_tokens=False)["input_ids"])


def _perturb(prompt: list[int], keep_tail: int, vocab: int, rng: random.Random) -> list[int]:
    """Delete and insert a few random spans before the last ``keep_tail`` tokens."""
    out = list(prompt)
    for _ in range(rng.randint(0, 3)):
        limit = len(out) - keep_tail
        if limit <= 2:
            break
        at = rng.randrange(1, limit)
        if rng.random() < 0.5:
            del out[at : at + rng.randint(1, 24)]
        else:
            out[at:at] = [
                rng.randrange(len(SPECIAL_TOKENS), vocab) for _ in range(rng.randint(1, 24))
            ]
    return out


def build_agent_model(
    model_dir: Path,
    *,
    seed: int = 0,
    max_steps: int = 400,
    perturbed: int = 2,
    progress: Callable[[int, float], None] | None = None,
) -> Path:
    """Train, check greedy answers in bfloat16, save a servable model dir."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    rng = random.Random(seed)
    model_dir.mkdir(parents=True, exist_ok=True)
    conv = conversation()
    tok = _build_tokenizer(model_dir, conv, vocab_size=2048)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    assert eos == EOS and tok.convert_tokens_to_ids("<tool_call>") == 3
    answers = [
        list(tok(conv.call, add_special_tokens=False)["input_ids"]) + [EOS],
        list(tok(FINAL_ANSWER, add_special_tokens=False)["input_ids"]) + [EOS],
        list(tok(conv.glm_call, add_special_tokens=False)["input_ids"]) + [EOS],
    ]
    prompts = [
        _ids(tok, conv.first, conv.tools),
        _ids(tok, conv.second, conv.tools),
        _ids(tok, conv.glm_first, conv.tools),
    ]
    # The call as the model wrote it (unsorted keys) too: a client that echoes
    # the raw arguments back still gets the final answer.
    echoed = json.loads(json.dumps(conv.second))
    echoed[2]["tool_calls"][0]["function"]["arguments"] = tool_arguments()
    extra = [(_ids(tok, echoed, conv.tools), 1)]
    tails = [
        len(_ids(tok, conv.first[-1:], [])),
        len(_ids(tok, conv.second[-1:], [])),
        len(_ids(tok, conv.glm_first[-1:], [])),
    ]
    vocab = len(tok)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=4096,
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
        tie_word_embeddings=True,
    )
    model: Any = LlamaForCausalLM(config)  # type: ignore[no-untyped-call]
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-3, weight_decay=0.0)
    answer_lens = [len(a) for a in answers]

    def rows() -> list[tuple[list[int], int, int]]:
        """(tokens, answer start, answer length): each exact prompt and perturbed copies."""
        out = []
        for i in range(len(prompts)):
            out.append((prompts[i] + answers[i], len(prompts[i]), answer_lens[i]))
            out.extend((p + answers[i], len(p), answer_lens[i]) for p, j in extra if j == i)
            for _ in range(perturbed):
                p = _perturb(prompts[i], tails[i] + 4, vocab, rng)
                out.append((p + answers[i], len(p), answer_lens[i]))
        return out

    loss = torch.tensor(float("inf"))
    for step in range(max_steps):
        # One sequence at a time, unpadded: no attention mask keeps SDPA on its
        # causal fast path, and the LM head runs only where there is a label
        # (the prompts are ~1100 tokens, the answers ~40): about 0.1 s a step.
        total = torch.zeros(())
        batch = rows()
        for tokens, start, n in batch:
            ids = torch.tensor([tokens])
            hidden = model.model(input_ids=ids).last_hidden_state[0, start - 1 : start - 1 + n]
            total = total + torch.nn.functional.cross_entropy(
                model.lm_head(hidden), ids[0, start : start + n], reduction="sum"
            )
        loss = total / sum(n for _, _, n in batch)
        opt.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        if progress is not None:
            progress(step, loss.item())
        # Done when the answers hold in fp32 and in the bf16 the engine serves: with
        # the task tool in the tool list (longer prompts) the fp32 answers at loss < 0.02
        # changed in bf16, so the bf16 copy is checked here and training goes on.
        if (
            step % 10 == 9
            and loss.item() < 0.02
            and _answers_ok(model, prompts, answers)
            and _answers_ok(copy.deepcopy(model).to(torch.bfloat16), prompts, answers)
        ):
            break
    else:
        raise RuntimeError(f"the agent model did not learn its answers (loss {loss.item():.4f})")
    model = model.to(torch.bfloat16)
    if not _answers_ok(model, prompts, answers):
        raise RuntimeError("the agent model's answers change in bfloat16")
    model.generation_config = GenerationConfig(  # type: ignore[no-untyped-call]
        eos_token_id=EOS, pad_token_id=PAD, bos_token_id=BOS
    )
    model.save_pretrained(model_dir, safe_serialization=True)
    return model_dir


def _answers_ok(model: Any, prompts: list[list[int]], answers: list[list[int]]) -> bool:
    """Greedy decoding of each prompt gives exactly its answer (then EOS)."""
    import torch

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for prompt, answer in zip(prompts, answers, strict=True):
                out = model.generate(
                    torch.tensor([prompt]),
                    max_new_tokens=len(answer) + 2,
                    do_sample=False,
                    eos_token_id=EOS,
                    pad_token_id=PAD,
                )
                if out[0, len(prompt) :].tolist() != answer:
                    return False
    finally:
        model.train(was_training)
    return True


def cached_agent_model(cache_root: Path) -> Path:
    """The trained model for the current agent prompt and tools, built once.

    The key covers everything training depends on (this file, the rendered
    conversation, the library versions), so a change to the system prompt or
    a tool retrains instead of serving a stale model.
    """
    import hashlib
    import shutil

    import tokenizers
    import torch
    import transformers

    conv = conversation()
    key = hashlib.sha256(
        json.dumps(
            [
                Path(__file__).read_text(encoding="utf-8"),
                conv.tools,
                conv.first,
                conv.second,
                conv.glm_first,
                conv.glm_call,
                torch.__version__,
                transformers.__version__,
                tokenizers.__version__,
            ],
            sort_keys=True,
            default=str,
        ).encode()
    ).hexdigest()[:16]
    final = cache_root / key
    cache_root.mkdir(parents=True, exist_ok=True)
    # One builder at a time: the suite's background build (tests/conftest.py) and a
    # fixture that needs the model meanwhile; the second waits and then finds it.
    with (cache_root / f"{key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "model.safetensors").exists():
            return final
        building = cache_root / f"{key}.building"
        shutil.rmtree(building, ignore_errors=True)
        build_agent_model(building)
        shutil.rmtree(final, ignore_errors=True)
        building.rename(final)  # complete or absent, never half-written
    return final


if __name__ == "__main__":
    # ``python -m tests.support.agent_model CACHE_ROOT``: the background build. Torch's
    # default threads, as a build inside the test process uses: the trained weights
    # depend on the summation order, and a one-thread model once answered the steer test
    # of tests/e2e/test_agent_conversation.py differently.
    import sys

    print(cached_agent_model(Path(sys.argv[1])), flush=True)
