"""Render a profile into the exact command and environment of one launch."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import ProfileError
from engine.paths import Paths

from ._schema import Profile

# Environment variables whose values never leave the process: they are shown
# as "<redacted>" by `engine command` and in session fingerprints.
SECRET_MARKERS: tuple[str, ...] = ("KEY", "TOKEN", "SECRET", "PASSWORD")


@dataclass(frozen=True)
class LaunchSpec:
    """Everything needed to start (or reach) one engine."""

    profile: str
    argv: list[str]
    """The full command line; empty for endpoint profiles."""
    env: dict[str, str]
    """Variables set on top of the caller's environment."""
    base_url: str
    """OpenAI-compatible base URL, ending in ``/v1``."""
    model: str | None
    """The model name to send in requests (None: ask ``/v1/models``)."""
    host: str = "127.0.0.1"
    port: int | None = None
    model_path: Path | None = None
    api_key_env: str | None = None
    extra: dict[str, str] = field(default_factory=dict)

    def redacted_env(self) -> dict[str, str]:
        return {k: ("<redacted>" if is_secret_name(k) else v) for k, v in self.env.items()}

    def shell_line(self) -> str:
        import shlex

        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.redacted_env().items()))
        cmd = shlex.join(self.argv)
        return f"{env} {cmd}".strip()


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    return any(marker in upper for marker in SECRET_MARKERS)


def expand(value: str, paths: Paths) -> str:
    return os.path.expanduser(value.replace("{data_dir}", str(paths.data_dir)))


def model_dir_for(profile: Profile, paths: Paths) -> Path:
    """Where the profile's model directory is (it may not exist yet)."""
    if profile.model_builtin is not None:
        return paths.models_dir / profile.model_builtin
    assert profile.model_path is not None
    return Path(expand(profile.model_path, paths))


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def render(profile: Profile, paths: Paths, *, port: int | None = None,
           python: str | None = None) -> LaunchSpec:
    """The exact command line and environment for ``profile``."""
    if profile.kind == "endpoint":
        assert profile.base_url is not None
        return LaunchSpec(
            profile=profile.name, argv=[], env={}, base_url=profile.base_url,
            model=profile.endpoint_model, api_key_env=profile.api_key_env,
        )
    port = port or profile.port
    if not 0 < port < 65536:
        raise ProfileError(f"port must be in 1..65535, got {port}")
    model_dir = model_dir_for(profile, paths)
    served = profile.served_name or model_dir.name
    argv = [
        python or sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_dir),
        "--served-model-name", served,
        "--host", profile.host,
        "--port", str(port),
    ]
    if profile.max_model_len:
        argv += ["--max-model-len", str(profile.max_model_len)]
    if profile.dtype:
        argv += ["--dtype", profile.dtype]
    if profile.quantization:
        argv += ["--quantization", profile.quantization]
    if profile.enforce_eager:
        argv.append("--enforce-eager")
    if profile.enable_prefix_caching is True:
        argv.append("--enable-prefix-caching")
    elif profile.enable_prefix_caching is False:
        argv.append("--no-enable-prefix-caching")
    if profile.gpu_memory_utilization is not None:
        argv += ["--gpu-memory-utilization", str(profile.gpu_memory_utilization)]
    if profile.reasoning_parser:
        argv += ["--reasoning-parser", profile.reasoning_parser]
    if profile.reasoning_config:
        argv += ["--reasoning-config", json.dumps(profile.reasoning_config, sort_keys=True)]
    if profile.tool_call_parser:
        argv += ["--tool-call-parser", profile.tool_call_parser]
    if profile.enable_auto_tool_choice:
        argv.append("--enable-auto-tool-choice")
    if profile.speculative is not None:
        spec = profile.speculative
        config: dict[str, object] = {
            "method": spec.method,
            "num_speculative_tokens": spec.num_speculative_tokens,
        }
        if spec.model:
            config["model"] = expand(spec.model, paths)
        argv += ["--speculative-config", json.dumps(config, sort_keys=True)]
    if profile.agent.structured_tools and "--structured-outputs-config" not in profile.extra_args:
        # The agent asks for whitespace-free steps per request, but vLLM 0.32's
        # xgrammar and guidance backends read that flag from the engine config only,
        # and it needs a named backend (xgrammar: what "auto" picks on the CPU).
        no_whitespace = {"backend": "xgrammar", "disable_any_whitespace": True}
        argv += ["--structured-outputs-config", json.dumps(no_whitespace)]
    argv += list(profile.extra_args)

    env: dict[str, str] = {}
    if profile.cpu_kvcache_space_gib is not None:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(profile.cpu_kvcache_space_gib)
    if profile.cpu_bind_all_cores:
        # vLLM reserves one core per worker by default, which leaves a single
        # OpenMP thread on a 2-core laptop; bind every core we may run on.
        env["VLLM_CPU_OMP_THREADS_BIND"] = _cpu_list()
        env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "0"
    if profile.model_runner_v2:
        env["VLLM_USE_V2_MODEL_RUNNER"] = "1"
    if profile.plugin_enabled:
        env["VLLM_PLUGINS"] = "sparkcode"
        env["SPARKCODE_PLUGIN_FEATURES"] = ",".join(profile.plugin_features)
    else:
        # An installed sparkcode plugin must not change engines that did not ask.
        env["SPARKCODE_PLUGIN_FEATURES"] = ""
    env.update(profile.env)
    return LaunchSpec(
        profile=profile.name, argv=argv, env=env,
        base_url=f"http://{_url_host(profile.host)}:{port}/v1", model=served,
        host=profile.host, port=port, model_path=model_dir,
    )


def _cpu_list() -> str:
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        cpus = list(range(os.cpu_count() or 1))
    return ",".join(str(c) for c in cpus)


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", "::", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host
