"""The engine supervisor: start, watch and stop one detached vLLM server.

Reach an engine through :func:`ensure_running` / :func:`running` (``_access.py``), not by
calling ``Supervisor.start`` yourself: the reuse rules and refusals live there.
"""

from __future__ import annotations

from ._access import EngineHandle, Reuse, attach, ensure_idle, ensure_running, running, stop_started
from ._checks import available_gib, ensure_memory, ensure_port_free, port_holder
from ._phases import PHASES, phase_of, plugin_lines
from ._record import EngineRecord
from ._supervisor import EngineState, EngineStatus, Supervisor, tail_lines, vllm_version

__all__ = [
    "PHASES",
    "EngineHandle",
    "EngineRecord",
    "EngineState",
    "EngineStatus",
    "Reuse",
    "Supervisor",
    "attach",
    "ensure_idle",
    "ensure_running",
    "available_gib",
    "ensure_memory",
    "ensure_port_free",
    "phase_of",
    "plugin_lines",
    "port_holder",
    "running",
    "stop_started",
    "tail_lines",
    "vllm_version",
]
