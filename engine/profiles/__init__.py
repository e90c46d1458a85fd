"""Engine profiles: the shipped ones and the user's own.

User profiles in ``<config>/profiles/*.toml`` override shipped ones of the same
name.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from engine.errors import ProfileError
from engine.paths import Paths

from ._cpu import CPU_BF16_ENV, CPU_VNNI_ENV, cpu_computes_bf16, cpu_has_vnni
from ._cpu import ram_gib as machine_ram_gib
from ._knobs import (
    DEGENERATE_MODES,
    KNOB_NAMES,
    REASONING_EFFORTS,
    AgentKnobs,
    DegenerateMode,
    EffortPlacement,
    ReasoningEffort,
    check_knobs,
    knobs_from,
    overlay,
)
from ._model_config import is_hybrid_config, read_model_config, text_config
from ._nodes import PARALLEL_MODES, NodeSpec, NodesSpec
from ._render import HUB_OFFLINE, LaunchSpec, is_secret_name, model_dir_for, render, render_nodes
from ._schema import (
    DEFAULT_KEPT_TURN_STATES,
    PLUGIN_FEATURES,
    TURN_STATE_UNIT,
    USAGE_STATS_OFF,
    Profile,
    SpeculativeSpec,
    load_profile_file,
    parse_profile,
)
from ._toml import TomlTable, convert_toml, decode_toml

__all__ = [
    "CPU_BF16_ENV",
    "CPU_VNNI_ENV",
    "DEGENERATE_MODES",
    "KNOB_NAMES",
    "DEFAULT_KEPT_TURN_STATES",
    "PLUGIN_FEATURES",
    "TURN_STATE_UNIT",
    "USAGE_STATS_OFF",
    "HUB_OFFLINE",
    "REASONING_EFFORTS",
    "AgentKnobs",
    "DegenerateMode",
    "EffortPlacement",
    "ReasoningEffort",
    "check_knobs",
    "cpu_computes_bf16",
    "cpu_has_vnni",
    "convert_toml",
    "decode_toml",
    "knobs_from",
    "overlay",
    "PARALLEL_MODES",
    "LaunchSpec",
    "NodeSpec",
    "NodesSpec",
    "Profile",
    "SpeculativeSpec",
    "TomlTable",
    "cpu_coder_name",
    "default_profile_name",
    "is_hybrid_config",
    "is_secret_name",
    "list_profiles",
    "load_profile",
    "load_profile_file",
    "model_dir_for",
    "parse_profile",
    "read_model_config",
    "render",
    "render_nodes",
    "text_config",
]


def _shipped_files() -> dict[str, Path]:
    root = resources.files("engine.profiles")
    out: dict[str, Path] = {}
    for entry in root.iterdir():
        if entry.name.endswith(".toml"):
            out[entry.name.removesuffix(".toml")] = Path(str(entry))
    return out


def _profile_files(paths: Paths) -> dict[str, Path]:
    files = _shipped_files()
    if paths.profiles_dir.is_dir():
        for path in sorted(paths.profiles_dir.glob("*.toml")):
            files[path.stem] = path
    return files


def list_profiles(paths: Paths) -> list[Profile]:
    """Every profile, shipped and user-defined, sorted by name."""
    return [load_profile_file(p) for _, p in sorted(_profile_files(paths).items())]


def load_profile(name: str, paths: Paths) -> Profile:
    """The profile called ``name``, or a path to a profile file."""
    if name.endswith(".toml") or "/" in name:
        return load_profile_file(Path(name).expanduser())
    files = _profile_files(paths)
    if name not in files:
        known = ", ".join(sorted(files))
        raise ProfileError(f"unknown profile {name!r} (known: {known})")
    profile = load_profile_file(files[name])
    if profile.name != name:
        raise ProfileError(
            f"{files[name]}: [profile] name is {profile.name!r} but the file is named {name!r}"
        )
    return profile


CODER_MIN_RAM_GIB = 14.0
"""Memory from which the CPU default is the 1.5B coder (cpu-coder): 3.5 GB of bf16
weights, a 2 GiB KV cache and about 2.5 GB for vLLM's processes (its [memory]
need_gib = 8) beside a desktop's own use; a "16 GB" machine reports about
15.5 GiB, so the line is drawn at 14. Below it, the 0.5B (cpu-coder-small,
need_gib = 5). The 1.5B is preferred wherever it fits: it solved by far the most of
the agent suite's tasks, slower but usable on 2 cores
(docs/experiments/2026-12-02-agent-suite.md). Cores are not part of the rule."""


def default_profile_name(paths: Paths | None = None) -> str:
    """The profile used when none is named.

    ``glm53-flash-spark`` on a CUDA machine. Without CUDA: the Qwen coder this
    machine suits (:func:`cpu_coder_name`) once its model is installed (verified
    by sha256: ``sparkcode models fetch``, which ``make run`` and
    ``scripts/setup-env.sh`` run; on a CPU with VNNI the 1.5B itself will do, its
    int8 copy being written from it at launch), else ``cpu-demo`` (SmolLM2-135M,
    shipped in a pip package, so it works with no download at all).
    """
    if _has_cuda_gpu():
        return "glm53-flash-spark"
    paths = paths or Paths.from_env()
    coder = cpu_coder_name()
    profile = load_profile(coder, paths)
    # The W8A8 copy is written at launch from the installed 1.5B (no download), so a
    # machine that installed the 1.5B before the copy existed keeps its coder.
    for builtin in (profile.model_builtin, profile.cpu_with_vnni):
        if builtin is not None and (paths.models_dir / builtin / "config.json").is_file():
            return coder
    return "cpu-demo"


def cpu_coder_name(ram_gib: float | None = None) -> str:
    """``cpu-coder`` (1.5B) with at least :data:`CODER_MIN_RAM_GIB` of memory,
    else ``cpu-coder-small`` (0.5B)."""
    ram_gib = ram_gib if ram_gib is not None else machine_ram_gib()
    return "cpu-coder" if ram_gib >= CODER_MIN_RAM_GIB else "cpu-coder-small"


def _has_cuda_gpu() -> bool:
    # Cheap check without importing torch: the NVIDIA driver's device nodes.
    return Path("/dev/nvidiactl").exists() or Path("/proc/driver/nvidia/version").exists()
