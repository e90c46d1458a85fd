"""The arithmetic of the check: occupancy, load coalescing and the static roofline.

All of it is a model (an estimate): it counts what the machine code must do and divides by
assumed machine rates, ignoring stalls, slow pipes, bank conflicts and L2. The rates are
printed with every run (``Device.describe``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Device:
    name: str
    arch: int
    sms: int
    ghz: float
    gbps: float  # usable DRAM bandwidth
    latency_ns: float  # DRAM load latency (bytes in flight needed = bandwidth x latency)
    max_warps: int  # per SM
    max_ctas: int  # per SM
    regs: int  # 32-bit registers per SM
    smem: int  # shared memory per SM usable by CTAs, bytes (each CTA also takes 1 KiB)
    issue: int = 4  # warp-instructions issued per clock per SM (4 schedulers)
    l1_wavefronts: int = 1  # L1TEX wavefronts per clock per SM

    def describe(self) -> str:
        return (
            f"{self.name} (sm_{self.arch}): {self.sms} SMs at {self.ghz} GHz, "
            f"{self.gbps:.0f} GB/s usable, {self.latency_ns:.0f} ns DRAM latency, "
            f"{self.issue} warp-instr/clk/SM, {self.l1_wavefronts} L1 wavefront/clk/SM; "
            f"per SM {self.max_warps} warps, {self.max_ctas} CTAs, {self.regs // 1024}K "
            f"registers, {self.smem // 1024} KiB shared memory"
        )


#: GB10 (DGX Spark): 48 SMs; 233 GB/s is what peers measured with saturating reads
#: (231-240, LPDDR5x); clock and latency are the notes' assumptions.
GB10 = Device("GB10", 121, 48, 2.5, 233.0, 700.0, 48, 24, 65536, 100 * 1024)
#: H100 SXM: 132 SMs, 1.98 GHz boost, 3.0 TB/s usable of 3.35.
H100 = Device("H100 SXM", 90, 132, 1.98, 3000.0, 600.0, 64, 32, 65536, 228 * 1024)
DEVICES = {121: GB10, 90: H100}


def ctas_per_sm(dev: Device, regs: int, warps: int, shared: int) -> tuple[int, str]:
    """Resident CTAs per SM and what limits them. Registers are allocated per warp in
    256-register units; every CTA takes its dynamic shared memory plus a 1 KiB reserve."""
    regs_per_warp = math.ceil(max(regs, 1) * 32 / 256) * 256
    limits = {
        "warps": dev.max_warps // warps,
        "registers": dev.regs // (regs_per_warp * warps),
        "shared memory": dev.smem // (shared + 1024),
        "CTA slots": dev.max_ctas,
    }
    what = min(limits, key=lambda k: limits[k])
    return limits[what], what


def lines_per_warp_load(
    width: int, elem_bytes: int, lanes_fast: int | None, extent_fast_bytes: int | None
) -> int:
    """128-B lines one warp-level load touches (one L1 wavefront each).

    A lane reading more than one element proves the compiler found the address contiguous
    along the layout's fastest dimension: ``lanes_fast`` lanes then read adjacent vectors, a
    run of ``lanes_fast * width`` bytes (at most the tile's extent there), and the warp's
    runs are separate rows. A lane reading one element proves nothing: counted as 32 lines
    (scattered), which is what today's W2 code loads are (32 lanes on 32 rows).
    """
    if width <= elem_bytes or lanes_fast is None:
        return 32 if width <= elem_bytes else max(1, math.ceil(32 * width / 128))
    run = lanes_fast * width
    if extent_fast_bytes:
        run = min(run, extent_fast_bytes)
    runs = max(1, 32 * width // run)
    return runs * math.ceil(run / 128)


def shared_wavefronts(width: int) -> int:
    """Wavefronts of one warp-level shared/local access without bank conflicts."""
    return max(1, math.ceil(32 * width / 128))


@dataclass(frozen=True)
class LoopCost:
    """One hot loop of one launch: what a CTA does per iteration, and how often."""

    instructions: int  # SASS instructions per iteration, per warp
    wavefronts: int  # L1 wavefronts per iteration, per warp
    warps: int
    iterations: int  # per CTA
    ctas: int  # CTAs that run the loop
    bytes: float  # bytes the launch must read from DRAM in this loop (each once)
    resident: int  # CTAs per SM
    in_flight: int = 1  # iterations of loads a CTA keeps in flight (cp.async stages - 1)


@dataclass(frozen=True)
class Roofline:
    memory_us: float
    issue_us: float
    l1_us: float
    latency_us: float

    @property
    def time_us(self) -> float:
        return max(self.memory_us, self.issue_us, self.l1_us, self.latency_us)

    @property
    def bound(self) -> str:
        times = {
            "memory": self.memory_us,
            "issue": self.issue_us,
            "L1": self.l1_us,
            "latency": self.latency_us,
        }
        return max(times, key=lambda k: times[k])


def roofline(dev: Device, loop: LoopCost) -> Roofline:
    """Four lower bounds on the loop's time; the launch takes at least the largest.

    memory: bytes at the usable bandwidth; issue: warp-instructions over the SMs' issue
    rate; L1: wavefronts over one per clock per SM; latency: the bytes the resident CTAs
    keep in flight (``in_flight`` iterations of loads each: 1 for plain loads, whose values
    the same iteration uses; stages - 1 for weights copied by cp.async) must cover
    bandwidth x latency, or the loop runs at in-flight bytes / latency.
    """
    clk = dev.sms * dev.ghz * 1e3  # per microsecond
    warp_iters = loop.warps * loop.iterations * loop.ctas
    memory = loop.bytes / (dev.gbps * 1e3)
    issue = loop.instructions * warp_iters / (clk * dev.issue)
    l1 = loop.wavefronts * warp_iters / (clk * dev.l1_wavefronts)
    per_iter = loop.bytes / max(loop.ctas * loop.iterations, 1)
    resident = min(loop.resident, math.ceil(loop.ctas / dev.sms))
    # bytes per ns = GB/s
    in_flight_gbps = dev.sms * resident * loop.in_flight * per_iter / dev.latency_ns
    latency = loop.bytes / (min(in_flight_gbps, dev.gbps) * 1e3) if per_iter else 0.0
    return Roofline(memory, issue, l1, latency)


def distinct_experts(tokens: int, experts: int, top_k: int) -> float:
    """Expected distinct experts a step routes to, uniform routing (1 token: exactly top_k)."""
    if tokens == 1:
        return float(top_k)
    return experts * (1 - (1 - top_k / experts) ** tokens)
