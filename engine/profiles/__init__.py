"""Engine profiles: the shipped ones and the user's own.

User profiles in ``<config>/profiles/*.toml`` override shipped ones of the same
name.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from engine.errors import ProfileError
from engine.paths import Paths

from ._render import LaunchSpec, is_secret_name, model_dir_for, render
from ._schema import (
    PLUGIN_FEATURES,
    REASONING_EFFORTS,
    AgentDefaults,
    Profile,
    SpeculativeSpec,
    load_profile_file,
    parse_profile,
)

__all__ = [
    "PLUGIN_FEATURES",
    "REASONING_EFFORTS",
    "AgentDefaults",
    "LaunchSpec",
    "Profile",
    "SpeculativeSpec",
    "default_profile_name",
    "is_secret_name",
    "list_profiles",
    "load_profile",
    "load_profile_file",
    "model_dir_for",
    "parse_profile",
    "render",
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


def default_profile_name() -> str:
    """``glm53-flash-spark`` on a CUDA machine, else the CPU demo."""
    return "glm53-flash-spark" if _has_cuda_gpu() else "cpu-demo"


def _has_cuda_gpu() -> bool:
    # Cheap check without importing torch: the NVIDIA driver's device nodes.
    return Path("/dev/nvidiactl").exists() or Path("/proc/driver/nvidia/version").exists()
