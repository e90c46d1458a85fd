"""The engine supervisor: start, watch and stop one detached vLLM server (one or two nodes)."""

from __future__ import annotations

from ._checks import available_gib, ensure_memory, ensure_port_free, port_holder
from ._node import LocalNode, NodeCheck, NodeStatus, model_fingerprint
from ._phases import PHASES, phase_of, plugin_lines
from ._record import EngineRecord
from ._supervisor import EngineState, EngineStatus, Supervisor, vllm_version
from ._tail import tail_lines
from ._transport import LocalTransport, NodeTransport, SshTransport, node_dir, transport_for

__all__ = [
    "PHASES",
    "EngineRecord",
    "EngineState",
    "EngineStatus",
    "LocalNode",
    "LocalTransport",
    "NodeCheck",
    "NodeStatus",
    "NodeTransport",
    "SshTransport",
    "Supervisor",
    "available_gib",
    "ensure_memory",
    "ensure_port_free",
    "model_fingerprint",
    "node_dir",
    "phase_of",
    "plugin_lines",
    "port_holder",
    "tail_lines",
    "transport_for",
    "vllm_version",
]
