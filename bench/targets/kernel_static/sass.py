"""Reading compiled kernels: SASS (``nvdisasm -c -gi``) and Triton's TTIR/TTGIR text.

* SASS: instructions with addresses and the source line each came from (the first line of
  a ``//## File ...`` block is the innermost of an inlined chain), labels, loops (a
  backward branch closes one), global loads and their per-lane width from the opcode
  (``LDG.E.U8`` 1 byte, ``LDG.E`` 4, ``.64`` 8, ``.128`` 16; ``LDGSTS`` likewise).
* TTIR: which kernel argument each ``tt.load`` reads (its pointer traced back through
  ``addptr``/``splat``/``broadcast``/... to a function argument), its source line, element
  width, and the ``scf.for`` it sits in with that loop's trip count when the bounds are
  constants or scalar arguments (their launch values are known).
* TTGIR: each global load's layout (``threadsPerWarp`` along its fastest dimension).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_INSTR = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(@!?U?P[T\d]+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")
_FILE = re.compile(r'^\s*//## File "([^"]+)", line (\d+)')
_LABEL = re.compile(r"^(\.L_x_\d+):")
_TARGET = re.compile(r"`\((\.L_x_\d+)\)")
_WIDTH = {"U8": 1, "S8": 1, "U16": 2, "S16": 2, "64": 8, "128": 16}


@dataclass(frozen=True)
class Instr:
    addr: int
    opcode: str  # with modifiers, e.g. LDG.E.U8
    operands: str
    file: str
    line: int


def parse_sass(text: str) -> tuple[list[Instr], dict[str, int]]:
    """Instructions in address order and each label's address."""
    instrs: list[Instr] = []
    labels: dict[str, int] = {}
    pending: list[str] = []
    where = ("", 0)
    new_block = True
    for raw in text.splitlines():
        if m := _FILE.match(raw):
            if new_block:
                where = (m.group(1), int(m.group(2)))  # innermost of the chain
            new_block = False
            continue
        new_block = True
        if m := _LABEL.match(raw):
            pending.append(m.group(1))
        elif m := _INSTR.match(raw):
            addr = int(m.group(1), 16)
            for label in pending:
                labels[label] = addr
            pending.clear()
            instrs.append(Instr(addr, m.group(3), m.group(4).strip(), *where))
    return instrs, labels


def load_width(opcode: str) -> int:
    """Bytes per lane of a load/store opcode (32-bit when no size modifier)."""
    parts = opcode.split(".")
    if parts[0] == "LDSM":  # LDSM.16.M88.{1,2,4}: 4 bytes per lane per 8x8 matrix
        return 4 * int(parts[-1]) if parts[-1] in ("2", "4") else 4
    for p in parts[1:]:
        if p in _WIDTH:
            return _WIDTH[p]
    return 4


def is_global_load(opcode: str) -> bool:
    head = opcode.split(".")[0]
    return head in ("LDG", "LDGSTS")


def is_shared_or_local(opcode: str) -> bool:
    return opcode.split(".")[0] in ("LDS", "STS", "LDSM", "LDL", "STL")


@dataclass(frozen=True)
class Loop:
    start: int
    end: int  # address of the closing backward branch
    body: tuple[Instr, ...]


def loops(instrs: list[Instr], labels: dict[str, int]) -> list[Loop]:
    """Innermost loops: a branch to a label at or before it, containing no other loop."""
    spans = []
    for ins in instrs:
        if ins.opcode.startswith("BRA") and (m := _TARGET.search(ins.operands)):
            target = labels.get(m.group(1))
            if target is not None and target <= ins.addr:
                spans.append((target, ins.addr))
    inner = [s for s in spans if not any(o != s and s[0] <= o[0] and o[1] <= s[1] for o in spans)]
    return [Loop(a, b, tuple(i for i in instrs if a <= i.addr <= b)) for a, b in inner]


# -- Triton IR ------------------------------------------------------------------------------

_OP = re.compile(r"^\s*(%[\w.#]+)(?::\d+)? = ([\w.]+)\s+(.*)$")
_LOCDEF = re.compile(r"^(#loc\d*) = loc\((.*)\)\s*$")
_TRAIL_LOC = re.compile(r"loc\((#loc\d*|\"[^\"]*\":\d+:\d+)\)\s*$")
_FOR = re.compile(r"scf\.for (%[\w.]+) = (%[\w.-]+) to (%[\w.-]+) step (%[\w.-]+)")
_CONST = re.compile(r"^\s*(%[\w.-]+) = arith\.constant (-?\d+) : i\d+")
_PTR_ELT = re.compile(r"!tt\.ptr<(\w+)>")
_PASS = (
    "tt.addptr",
    "tt.splat",
    "tt.broadcast",
    "tt.expand_dims",
    "tt.reshape",
    "tt.trans",
    "ttg.convert_layout",
    "tt.bitcast",
    "tt.make_tensor_ptr",
    "tt.advance",
    "iter_arg",
)
_ITER = re.compile(r"(%[\w.]+) = (%[\w.]+)")
_BITS = {
    "i1": 1,
    "i8": 8,
    "f8E4M3FN": 8,
    "f8E5M2": 8,
    "i16": 16,
    "bf16": 16,
    "f16": 16,
    "i32": 32,
    "f32": 32,
    "i64": 64,
    "f64": 64,
}


@dataclass(frozen=True)
class IrLoad:
    file: str
    line: int
    arg: str | None  # the kernel argument the pointer comes from, if traced
    elem_bits: int
    loop: int | None  # index into IrModule.trips, or None outside loops
    shape: tuple[int, ...] = ()
    layout: str = ""


@dataclass
class IrModule:
    args: list[str]
    loads: list[IrLoad]
    trips: list[int | None] = field(default_factory=list)  # per scf.for, when known


def _resolve_locs(text: str) -> dict[str, tuple[str, int]]:
    raw = {m.group(1): m.group(2) for line in text.splitlines() if (m := _LOCDEF.match(line))}
    out: dict[str, tuple[str, int]] = {}

    def resolve(body: str, depth: int = 0) -> tuple[str, int]:
        if depth > 50:
            return ("", 0)
        if m := re.match(r'^"([^"]*)":(\d+):\d+', body):
            return (m.group(1), int(m.group(2)))
        if m := re.match(r"^callsite\((#loc\d*) at", body):  # innermost frame first
            return resolve(raw.get(m.group(1), ""), depth + 1)
        if m := re.search(r"\((#loc\d*)\)$", body):  # a named loc: "name"(#locN)
            return resolve(raw.get(m.group(1), ""), depth + 1)
        if body.startswith("#loc"):
            return resolve(raw.get(body, ""), depth + 1)
        return ("", 0)

    for name, body in raw.items():
        out[name] = resolve(body)
    return out


def parse_ir(text: str, scalars: dict[str, int]) -> IrModule:
    """Loads of a TTIR or TTGIR module. ``scalars`` holds the integer launch arguments by
    name (loop bounds); TTGIR loads also get their tensor shape and layout name."""
    locs = _resolve_locs(text)
    head = re.search(r"tt\.func public @\w+\((.*?)\)\s*(attributes|\{)", text, re.S)
    args = re.findall(r"%(\w+): ", head.group(1)) if head else []
    consts = {
        m.group(1): int(m.group(2)) for line in text.splitlines() if (m := _CONST.match(line))
    }
    defs: dict[str, tuple[str, str]] = {}
    module = IrModule(args, [])
    stack: list[int | None] = []

    def value(name: str) -> int | None:
        if name in consts:
            return consts[name]
        return scalars.get(name.lstrip("%"))

    def trace(name: str) -> str | None:
        for _ in range(64):
            if name.lstrip("%") in args:
                return name.lstrip("%")
            op = defs.get(name)
            if op is None or op[0] not in _PASS:
                return None
            name = op[1].split(",")[0].split()[0]
        return None

    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("}"):
            if stack:
                stack.pop()
        if m := _OP.match(line):
            defs[m.group(1)] = (m.group(2), m.group(3))
        loop = next((s for s in reversed(stack) if s is not None), None)
        if m := _FOR.search(line):
            if it := re.search(r"iter_args\((.*?)\) ->", line):
                for a, b in _ITER.findall(it.group(1)):  # a loop-carried value: its start
                    defs[a] = ("iter_arg", b)
            lb, ub, step = value(m.group(2)), value(m.group(3)), value(m.group(4))
            trip = None
            if lb is not None and ub is not None and step:
                trip = -(-(ub - lb) // step)
            module.trips.append(trip)
        is_load = " tt.load " in line or "ttg.async_copy_global_to_local" in line
        if is_load and (m := _OP.match(line)):
            ptr = m.group(3).split(",")[0].split()[0]
            elt = _PTR_ELT.search(m.group(3))
            where = ("", 0)
            if lm := _TRAIL_LOC.search(line):
                ref = lm.group(1)
                where = (
                    locs.get(ref, ("", 0))
                    if ref.startswith("#")
                    else (ref.split('"')[1], int(ref.rsplit(":", 2)[1]))
                )
            shape_m = re.search(r"tensor<([\dx]+)x!tt\.ptr<\w+>(?:, (#[\w]+))?", m.group(3))
            shape = tuple(int(d) for d in shape_m.group(1).split("x")) if shape_m else ()
            module.loads.append(
                IrLoad(
                    where[0],
                    where[1],
                    trace(ptr),
                    _BITS.get(elt.group(1), 8) if elt else 8,
                    loop,
                    shape,
                    shape_m.group(2) or "" if shape_m else "",
                )
            )
        if stripped.endswith("{"):
            stack.append(len(module.trips) - 1 if _FOR.search(line) else None)
    return module


_BLOCKED = re.compile(
    r"^(#blocked\d*) = #ttg\.blocked<\{sizePerThread = \[([\d, ]+)\], "
    r"threadsPerWarp = \[([\d, ]+)\], warpsPerCTA = \[([\d, ]+)\], "
    r"order = \[([\d, ]+)\]"
)


def blocked_layouts(ttgir: str) -> dict[str, tuple[list[int], list[int]]]:
    """``{name: (threadsPerWarp, order)}`` of every blocked layout."""
    out = {}
    for line in ttgir.splitlines():
        if m := _BLOCKED.match(line):
            out[m.group(1)] = (
                [int(x) for x in m.group(3).split(",")],
                [int(x) for x in m.group(5).split(",")],
            )
    return out
