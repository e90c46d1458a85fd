"""From one compiled launch to the figures the check prints and judges.

Packed weights and scales are the launch's tensor arguments of one-byte elements with at
least 64 Ki of them (codes, nibbles, P12 payloads, ue5m3/e4m3 scales; not the 16-entry P12
exponent table). A SASS global load is one of theirs when its source line is that of a
``tt.load`` whose pointer traces back to such an argument.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.targets.kernel_static import model, sass
from bench.targets.kernel_static.build import Built
from bench.targets.kernel_static.launches import EXPERTS, TOP_K, Launch

_BYTE_TYPES = ("uint8", "int8", "float8_e4m3fn", "float8_e5m2")
WEIGHT_MIN_ELEMENTS = 65536


@dataclass(frozen=True)
class WeightLoad:
    line: int
    arg: str
    opcode: str
    width: int  # bytes per lane
    lines_per_warp: int  # 128-B lines per warp-level load
    in_loop: bool


@dataclass(frozen=True)
class HotLoop:
    args: tuple[str, ...]  # the weight arguments it reads (its branch: W2 codes, FP4, ...)
    cost: model.LoopCost
    roof: model.Roofline | None


@dataclass
class Report:
    launch: Launch
    built: Built
    ctas: int = 0
    limiter: str = ""
    occupancy: float = 0.0
    loads: list[WeightLoad] = field(default_factory=list)
    loops: list[HotLoop] = field(default_factory=list)

    @property
    def narrow(self) -> list[WeightLoad]:
        return [w for w in self.loads if w.width < 4]


def weight_args(launch: Launch, names: list[str]) -> dict[str, tuple[int, ...]]:
    """``{argument name: shape}`` of the packed weights and scales among the launch args."""
    out = {}
    for name, arg in zip(names, launch.args, strict=False):
        numel = 1
        for s in arg.shape:
            numel *= s
        if arg.dtype in _BYTE_TYPES and numel >= WEIGHT_MIN_ELEMENTS:
            out[name] = arg.shape
    return out


def analyze(launch: Launch, built: Built) -> Report:
    rep = Report(launch, built)
    if not built.ok:
        return rep
    dev = model.DEVICES[built.arch]
    rep.ctas, rep.limiter = model.ctas_per_sm(dev, built.regs, built.num_warps, built.shared)
    rep.occupancy = rep.ctas * built.num_warps / dev.max_warps
    scalars = {}
    ttir = sass.parse_ir(built.ttir, {})
    for name, arg in zip(ttir.args, launch.args, strict=False):
        if isinstance(arg.value, int) and not isinstance(arg.value, bool):
            scalars[name] = arg.value
    ttir = sass.parse_ir(built.ttir, scalars)
    weights = weight_args(launch, ttir.args)
    ttgir = sass.parse_ir(built.ttgir, scalars)
    layouts = sass.blocked_layouts(built.ttgir)
    by_line: dict[tuple[str, int], sass.IrLoad] = {}
    for ld in ttir.loads:
        if ld.arg in weights or (ld.arg is None and ld.elem_bits == 8):
            by_line[(ld.file, ld.line)] = ld
    shape_at = {(g.file, g.line): g for g in ttgir.loads if g.layout in layouts}
    instrs, labels = sass.parse_sass(built.sass)
    # Triton 3.9 sometimes tags a load's PTX a few lines below its tt.load (seen: +1 for an
    # unmasked scalar load, +4 for a vectorized one in a loop): a SASS load without a tt.load
    # on its own line belongs to the nearest tt.load above it in the same file (<= 8 lines).
    ir_lines: dict[str, list[int]] = {}
    for g in ttir.loads:
        ir_lines.setdefault(g.file, []).append(g.line)
    for ins in instrs:
        if not sass.is_global_load(ins.opcode) or ins.line in ir_lines.get(ins.file, ()):
            continue
        above = [n for n in ir_lines.get(ins.file, ()) if ins.line - 8 <= n < ins.line]
        if above and (ins.file, max(above)) in by_line:
            key = (ins.file, max(above))
            by_line[(ins.file, ins.line)] = by_line[key]
            if key in shape_at:
                shape_at[(ins.file, ins.line)] = shape_at[key]
    loops = sass.loops(instrs, labels)
    in_loop = {i.addr for lp in loops for i in lp.body}

    def lines_for(ins: sass.Instr, elem_bytes: int) -> int:
        g = shape_at.get((ins.file, ins.line))
        width = sass.load_width(ins.opcode)
        if g is None:
            return model.lines_per_warp_load(width, elem_bytes, None, None)
        tpw, order = layouts[g.layout]
        fast = order[0]
        extent = g.shape[fast] * max(g.elem_bits // 8, 1) if g.shape else None
        return model.lines_per_warp_load(width, max(g.elem_bits // 8, 1), tpw[fast], extent)

    for ins in instrs:
        wl = by_line.get((ins.file, ins.line))
        if wl is not None and sass.is_global_load(ins.opcode):
            rep.loads.append(
                WeightLoad(
                    ins.line,
                    wl.arg or "?",
                    ins.opcode,
                    sass.load_width(ins.opcode),
                    lines_for(ins, max(wl.elem_bits // 8, 1)),
                    ins.addr in in_loop,
                )
            )
    ir_at = {(ld.file, ld.line): ld for ld in ttir.loads}
    for lp in loops:
        args = sorted(
            {
                by_line[(i.file, i.line)].arg or "?"
                for i in lp.body
                if (i.file, i.line) in by_line and sass.is_global_load(i.opcode)
            }
        )
        if not args:
            continue
        trips = {
            ttir.trips[ld.loop]
            for ld in ttir.loads
            if ld.arg in args and ld.loop is not None and ld.loop < len(ttir.trips)
        }
        wave = 0
        for ins in lp.body:
            if sass.is_global_load(ins.opcode):
                bits = (
                    ir_at[(ins.file, ins.line)].elem_bits if (ins.file, ins.line) in ir_at else 32
                )
                wave += lines_for(ins, max(bits // 8, 1))
            elif sass.is_shared_or_local(ins.opcode):
                wave += model.shared_wavefronts(sass.load_width(ins.opcode))
        trip = next(iter(trips)) if len(trips) == 1 else None
        async_only = all(
            i.opcode.startswith("LDGSTS")
            for i in lp.body
            if (i.file, i.line) in by_line and sass.is_global_load(i.opcode)
        )
        in_flight = max(1, built.num_stages - 1) if async_only else 1
        cost, roof = _moe_decode_cost(
            launch,
            weights,
            tuple(args),
            len(lp.body),
            wave,
            built.num_warps,
            trip,
            rep.ctas,
            in_flight,
            dev,
        )
        rep.loops.append(HotLoop(tuple(args), cost, roof))
    return rep


def _moe_decode_cost(
    launch: Launch,
    weights: dict[str, tuple[int, ...]],
    args: tuple[str, ...],
    instrs: int,
    wave: int,
    warps: int,
    trip: int | None,
    resident: int,
    in_flight: int,
    dev: model.Device,
) -> tuple[model.LoopCost, model.Roofline | None]:
    """A decode step of the fused MoE: the loop reads whole experts' slices of its
    ``[experts, rows, bytes]`` weight tensors; each routed expert gets ``grid[1]`` CTAs.
    Other launches (prefill, codec kernels) get the per-iteration cost without a roofline."""
    decode = (
        launch.case.startswith("moe decode")
        and trip is not None
        and all(len(weights.get(a, ())) == 3 for a in args)
        and len(launch.grid) > 1
    )
    if not decode:
        return model.LoopCost(instrs, wave, warps, trip or 0, 0, 0.0, resident, in_flight), None
    active = model.distinct_experts(launch.tokens, EXPERTS, TOP_K)
    nbytes = 0.0
    for a in args:
        shape = weights[a]
        nbytes += active * shape[1] * shape[2]
    cost = model.LoopCost(
        instrs, wave, warps, trip or 0, round(active * launch.grid[1]), nbytes, resident, in_flight
    )
    return cost, model.roofline(dev, cost)
