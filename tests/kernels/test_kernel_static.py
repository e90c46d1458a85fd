"""The static kernel check (``python -m bench.targets.kernel_static``): its parsing and
arithmetic on small inputs, tiny kernels compiled for sm_121 whose faults it must flag, and
the whole check on ``kernels/`` at GLM-5.3-Flash shapes, which must pass (issue 21's criteria)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bench.targets.kernel_static import model, sass
from bench.targets.kernel_static.build import parse_ptxas_log
from kernels import _triton
from tests.support import ROOT

needs_triton = pytest.mark.skipif(not _triton.HAVE_TRITON, reason="no Triton")

SASS = textwrap.dedent("""\
    \t//## File "/k.py", line 10
            /*0000*/                   LDC R1, c[0x0][0x37c] ;
    .L_x_1:
    \t//## File "/k.py", line 12 inlined at "/k.py", line 30
    \t//## File "/k.py", line 30
            /*0010*/              @!P0 LDG.E.U8 R5, desc[UR4][R4.64] ;
            /*0020*/                   LDG.E.128 R8, desc[UR4][R6.64] ;
            /*0030*/                   LDGSTS.E.BYPASS.64 [R9], desc[UR4][R2.64], P3 ;
    \t//## File "/k.py", line 31
            /*0040*/                   STS.U16 [R3], R5 ;
            /*0050*/                   LDSM.16.MT88.4 R12, [R3] ;
            /*0060*/                   BRA.U !UP0, `(.L_x_1) ;
            /*0070*/                   EXIT ;
    """)

TTIR = textwrap.dedent("""\
    #loc = loc("/k.py":5:1)
    module {
      tt.func public @k(%w_ptr: !tt.ptr<i8> loc("w_ptr"(#loc)), %n: i32 loc("n"(#loc))) {
        %c0_i32 = arith.constant 0 : i32 loc(#loc1)
        %c64_i32 = arith.constant 64 : i32 loc(#loc1)
        %0 = scf.for %k = %c0_i32 to %n step %c64_i32 iter_args(%a = %c0_i32) -> (i32) : i32 {
          %1 = tt.splat %w_ptr : !tt.ptr<i8> -> tensor<64x!tt.ptr<i8>> loc(#loc2)
          %2 = tt.addptr %1, %r : tensor<64x!tt.ptr<i8>>, tensor<64xi32> loc(#loc2)
          %3 = tt.load %2 : tensor<64x!tt.ptr<i8>> loc(#loc3)
          scf.yield %a : i32 loc(#loc1)
        } loc(#loc1)
        tt.return loc(#loc)
      } loc(#loc)
    } loc(#loc)
    #loc1 = loc("/k.py":7:3)
    #loc2 = loc("/k.py":12:20)
    #loc4 = loc("/k.py":12:9)
    #loc3 = loc("byte"(#loc5))
    #loc5 = loc(callsite(#loc4 at #loc1))
    """)


def test_sass_lines_widths_and_loops() -> None:
    instrs, labels = sass.parse_sass(SASS)
    assert labels == {".L_x_1": 0x10}
    loads = [
        (i.opcode, sass.load_width(i.opcode), i.line)
        for i in instrs
        if sass.is_global_load(i.opcode)
    ]
    # the innermost line of an inlined chain; a predicated load keeps its opcode
    assert loads == [("LDG.E.U8", 1, 12), ("LDG.E.128", 16, 12), ("LDGSTS.E.BYPASS.64", 8, 12)]
    assert [
        sass.load_width(op) for op in ("LDG.E", "LDG.E.64", "LDS.U16", "LDSM.16.MT88.4", "STL.S16")
    ] == [4, 8, 2, 16, 2]
    (loop,) = sass.loops(instrs, labels)
    assert (loop.start, loop.end, len(loop.body)) == (0x10, 0x60, 6)
    assert not sass.is_global_load("LDGDEPBAR") and sass.is_shared_or_local("LDL.LU")


def test_ir_traces_loads_to_arguments_and_loop_trip_counts() -> None:
    ir = sass.parse_ir(TTIR, {"n": 4096})
    assert ir.args == ["w_ptr", "n"]
    (load,) = ir.loads
    assert (load.file, load.line, load.arg, load.elem_bits, load.shape) == (
        "/k.py",
        12,
        "w_ptr",
        8,
        (64,),
    )
    assert load.loop == 0 and ir.trips == [64]  # 4096 / 64
    assert sass.parse_ir(TTIR, {}).trips == [None]  # the bound's value unknown


def test_ir_traces_a_loop_carried_pointer_to_its_argument() -> None:
    text = TTIR.replace(
        "iter_args(%a = %c0_i32) -> (i32) : i32 {",
        "iter_args(%a = %c0_i32, %p = %1) -> (i32, tensor<64x!tt.ptr<i8>>) : i32 {",
    ).replace("%3 = tt.load %2", "%3 = tt.load %p")
    text = text.replace(
        "        %0 = scf.for",
        "        %1 = tt.splat %w_ptr : !tt.ptr<i8> -> "
        "tensor<64x!tt.ptr<i8>> loc(#loc2)\n        %0 = scf.for",
        1,
    )
    (load,) = sass.parse_ir(text, {"n": 256}).loads
    assert (load.arg, load.loop) == ("w_ptr", 0)


def test_ptxas_log() -> None:
    log = (
        "ptxas info    : Function properties for k\n    256 bytes stack frame, 250 bytes "
        "spill stores, 258 bytes spill loads\nptxas info    : Used 255 registers, used 1 "
        "barriers\n"
    )
    assert parse_ptxas_log(log) == (255, 250, 258)
    with pytest.raises(ValueError, match="no register/spill line"):
        parse_ptxas_log("ptxas fatal")


def test_ctas_per_sm() -> None:
    # 241 registers -> 31 units of 256 per warp: 4 warps take 31,744 of 65,536 registers.
    assert model.ctas_per_sm(model.GB10, 241, 4, 32 * 1024) == (2, "registers")
    # 80 KiB + the 1 KiB reserve fits once in GB10's 100 KiB, twice in H100's 228 KiB.
    assert model.ctas_per_sm(model.GB10, 128, 4, 80 * 1024) == (1, "shared memory")
    assert model.ctas_per_sm(model.H100, 128, 4, 80 * 1024) == (2, "shared memory")
    assert model.ctas_per_sm(model.GB10, 19, 4, 0) == (12, "warps")  # 48 warps / 4
    assert model.ctas_per_sm(model.H100, 16, 1, 0) == (32, "CTA slots")


def test_lines_per_warp_load() -> None:
    assert model.lines_per_warp_load(1, 1, 32, 32) == 32  # one byte a lane: scattered
    assert model.lines_per_warp_load(16, 1, 8, 128) == 4  # 4 rows of 8 lanes x 16 B
    assert model.lines_per_warp_load(8, 1, 4, 32) == 8  # 8 rows of 32 B: one line each
    assert model.lines_per_warp_load(16, 1, 32, 2048) == 4  # one 512-B run
    assert model.lines_per_warp_load(4, 4, None, None) == 32


def test_roofline_arithmetic() -> None:
    dev = model.Device(
        "toy",
        121,
        sms=2,
        ghz=1.0,
        gbps=100.0,
        latency_ns=1000.0,
        max_warps=48,
        max_ctas=24,
        regs=65536,
        smem=100 * 1024,
    )
    # 4 CTAs x 10 iterations x 4 warps = 160 warp-iterations on 2 SMs at 1 GHz.
    loop = model.LoopCost(
        instructions=500, wavefronts=100, warps=4, iterations=10, ctas=4, bytes=1e6, resident=2
    )
    roof = model.roofline(dev, loop)
    assert roof.memory_us == pytest.approx(10.0)  # 1 MB at 100 GB/s
    assert roof.issue_us == pytest.approx(500 * 160 / (2e3 * 4))  # 10 us
    assert roof.l1_us == pytest.approx(100 * 160 / 2e3)  # 8 us
    # 25 kB per CTA-iteration, 2 SMs x 2 CTAs in flight = 100 kB per us = 100 GB/s
    assert roof.latency_us == pytest.approx(10.0)
    assert roof.bound in ("memory", "issue", "latency") and roof.time_us == pytest.approx(10.0)
    slow = model.roofline(dev, model.LoopCost(500, 400, 4, 10, 4, 1e6, 2))
    assert slow.bound == "L1" and slow.time_us == pytest.approx(32.0)
    assert model.distinct_experts(1, 288, 8) == 8
    assert model.distinct_experts(8, 288, 8) == pytest.approx(58.11, abs=0.01)


def _child(*args: str, timeout: int) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


FIXTURE = """
import json, sys
from bench.targets.kernel_static.build import _worker_env, compile_one
_worker_env(sys.argv[1])  # TRITON_INTERPRET off, ptxas log on, a private Triton cache
from bench.targets.kernel_static.analyze import analyze
from bench.targets.kernel_static.launches import Arg, Launch
M = "tests.kernels.static_fixture_kernels"
u8, i32, f32 = (lambda n: Arg("uint8", (n,))), (lambda n: Arg("int32", (n,))), \\
    (lambda n: Arg("float32", (n,)))
cases = [
    Launch("scattered", M, "scattered_bytes", (1,), (u8(1 << 20), i32(128), Arg(None, (), 4096)),
           (("BLOCK", 128),), 0),
    Launch("contiguous", M, "contiguous_bytes", (1,),
           (u8(1 << 20), i32(2048), Arg(None, (), 1 << 20)), (("BLOCK", 2048),), 0),
    Launch("spilling", M, "spilling", (1,), (f32(1 << 14), f32(1 << 14)),
           (("BLOCK", 128), ("num_warps", 1)), 0),
    Launch("broken", M, "scattered_bytes", (1,), (u8(1 << 20),), (("BLOCK", 128),), 0)]
out = {}
for launch in cases:
    b = compile_one(launch, 121)
    r = analyze(launch, b)
    out[launch.case] = dict(ok=b.ok, error=b.error, spills=[b.spill_stores, b.spill_loads],
                            loads=[[w.opcode, w.width, w.lines_per_warp] for w in r.loads],
                            narrow=len(r.narrow), loops=[[l.args, l.cost.iterations]
                                                         for l in r.loops])
print(json.dumps(out))
"""


@needs_triton
@pytest.mark.slow
def test_tiny_kernels_compiled_for_sm121_are_judged(tmp_path: Path) -> None:
    proc = _child("-c", FIXTURE, str(tmp_path), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    broken = got.pop("broken")  # a launch missing arguments: reported, not raised
    assert not broken["ok"] and "TypeError" in broken["error"], broken
    assert all(case["ok"] for case in got.values()), got
    # bytes from 128 rows: one byte a lane, 32 lines a warp, flagged narrower than 32 bits
    assert got["scattered"]["loads"] == [["LDG.E.U8", 1, 32]]
    assert got["scattered"]["narrow"] == 1 and got["scattered"]["spills"] == [0, 0]
    # contiguous bytes: 128-bit loads, a warp's 512 B in 4 lines, the loop's 512 trips
    assert got["contiguous"]["loads"] == [["LDG.E.128", 16, 4]]
    assert got["contiguous"]["narrow"] == 0
    assert got["contiguous"]["loops"] == [[["src_ptr"], 512]]
    # a 128x128 fp32 tile live in one warp (512 values a lane) spills
    stores, loads = got["spilling"]["spills"]
    assert stores > 0 and loads > 0


@needs_triton
@pytest.mark.slow
def test_static_check_passes_on_the_kernels(tmp_path: Path) -> None:
    """Issue 21's criteria at GLM-5.3-Flash shapes: every launch compiles for sm_121 and
    sm_90, nothing spills, packed weight/scale loads are at least 32 bits wide, and a decode
    step of the fused MoE is predicted at >= 80% of GB10's bandwidth at 1 and 8 tokens."""
    out = tmp_path / "static.json"
    proc = _child("-m", "bench.targets.kernel_static", "--json", str(out), timeout=1200)
    text = proc.stdout + proc.stderr[-2000:]
    assert "launch specializations x 2 targets" in proc.stdout, text
    data = json.loads(out.read_text())
    shares = data["decode_share"]
    for case in ("moe decode T=1", "moe decode T=8", "moe decode T=1 pool", "moe decode T=8 pool"):
        assert case in shares, text
        assert min(shares[case].values()) >= 0.8, f"{case}: {shares[case]}\n{text}"
    assert data["failures"] == [], text
    assert proc.returncode == 0 and "\nPASS: 0 failures" in proc.stdout, text
