"""The engine supervisor: start, watch and stop one detached vLLM server (one or two nodes).

Reach an engine through :func:`ensure_running` / :func:`running` (``_access.py``), not by
calling ``Supervisor.start`` yourself: the reuse rules and refusals live there.
"""

from __future__ import annotations

from ._access import EngineHandle, Reuse, attach, ensure_idle, ensure_running, running, stop_started
from ._checks import available_gib, ensure_memory, ensure_port_free, port_holder
from ._node import LocalNode, NodeCheck, NodeStatus, model_fingerprint
from ._phases import PHASES, phase_of, plugin_lines
from ._record import EngineRecord
from ._supervisor import EngineState, EngineStatus, Supervisor, likely_cause, vllm_version
from ._tail import tail_lines
from ._transport import LocalTransport, NodeTransport, SshTransport, node_dir, transport_for

__all__ = [
    "PHASES",
    "EngineHandle",
    "EngineRecord",
    "EngineState",
    "EngineStatus",
    "LocalNode",
    "LocalTransport",
    "NodeCheck",
    "NodeStatus",
    "NodeTransport",
    "Reuse",
    "SshTransport",
    "Supervisor",
    "attach",
    "ensure_idle",
    "ensure_running",
    "available_gib",
    "likely_cause",
    "ensure_memory",
    "ensure_port_free",
    "model_fingerprint",
    "node_dir",
    "phase_of",
    "plugin_lines",
    "port_holder",
    "running",
    "stop_started",
    "tail_lines",
    "transport_for",
    "vllm_version",
]
