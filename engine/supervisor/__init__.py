"""The engine supervisor: start, watch and stop one detached vLLM server."""

from __future__ import annotations

from ._checks import available_gib, ensure_memory, ensure_port_free, port_holder
from ._phases import PHASES, phase_of, plugin_lines
from ._record import EngineRecord
from ._supervisor import EngineState, EngineStatus, Supervisor, tail_lines, vllm_version

__all__ = [
    "PHASES",
    "EngineRecord",
    "EngineState",
    "EngineStatus",
    "Supervisor",
    "available_gib",
    "ensure_memory",
    "ensure_port_free",
    "phase_of",
    "plugin_lines",
    "port_holder",
    "tail_lines",
    "vllm_version",
]
