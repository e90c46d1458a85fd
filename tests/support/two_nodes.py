"""Two vLLM "nodes" on this machine: the tiny Qwen3-MoE at TP=2, head and headless worker.

Shared by the two-node tests (and reusable by other TP=2 tests): both nodes talk gloo
over loopback at a free master port, each bound to its own core
(``VLLM_CPU_OMP_THREADS_BIND`` 0 and 1; the same list on both would bind both to the
same cores). A boot took 3-3.5 min and about 5.4 GB on a loaded 2-core box
(/work/shared/notes/multinode.md), so a test module boots it once.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.engine import free_port
from tests.support.tiny_models import write_profile


def node_cpus() -> tuple[str, str]:
    """One core per node where there are two or more; both share core 0 otherwise."""
    cpus = sorted(os.sched_getaffinity(0))
    return (str(cpus[0]), str(cpus[1])) if len(cpus) > 1 else (str(cpus[0]), str(cpus[0]))


def write_two_node_profile(
    config_dir: Path,
    name: str,
    model_dir: Path,
    *,
    parallel: str = "tp",
    extra: str = "",
    server: str = "",
    max_model_len: int = 2048,
    dtype: str = "bfloat16",
) -> Path:
    """A user profile serving ``model_dir`` at TP=2 on two local nodes (no ssh);
    ``server`` is more of its ``[server]`` table, ``extra`` more tables."""
    head_cpus, worker_cpus = node_cpus()
    nodes = f"""
[nodes]
parallel = "{parallel}"
tensor_parallel = 2
master_port = {free_port()}

[nodes.head]
address = "127.0.0.1"
cpus = "{head_cpus}"

[nodes.worker]
address = "127.0.0.1"
cpus = "{worker_cpus}"
"""
    return write_profile(
        config_dir,
        name,
        model_dir,
        free_port(),
        extra + nodes,
        max_model_len=max_model_len,
        dtype=dtype,
        server=server,
    )
