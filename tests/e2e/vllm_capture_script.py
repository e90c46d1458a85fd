"""Run by test_capture_vllm.py in a subprocess: capture MoE inputs inside vLLM.

argv: MODEL_DIR OUT_FILE. Uses the documented workflow: eager mode, in-process
engine, ``LLM.apply_model`` to attach and to save.
"""

from __future__ import annotations

import os
import sys
from functools import partial

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def main() -> None:
    from vllm import LLM, SamplingParams

    from engine.quant.calib import attach_to_model, save_from_model

    model_dir, out = sys.argv[1], sys.argv[2]
    llm = LLM(model=model_dir, enforce_eager=True, max_model_len=512, dtype="bfloat16")
    hooks = llm.apply_model(partial(attach_to_model, max_tokens=64))
    prompts = [
        "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1)",
        "import os\nfor root, dirs, files in os.walk('.'):\n    print(root)",
    ]
    llm.generate(prompts, SamplingParams(max_tokens=1))
    layers = llm.apply_model(partial(save_from_model, path=out, source="vllm tiny qwen3-moe"))
    print(f"hooks={hooks} layers={layers}")


if __name__ == "__main__":
    main()
