"""Run the static kernel check: ``python -m bench.targets.kernel_static [--jobs 2] [--json PATH]``.

Compiles every ``kernels/`` entry point for sm_121 (GB10) and sm_90 (H100/H200) at
GLM-5.3-Flash shapes, as each wrapper launches it, and prints per kernel and target:
registers, spills, shared memory, CTAs per SM, the width and L1 lines of every packed
weight/scale load (SASS, by source line) and a static roofline of the fused MoE's hot loops.
Exit 1 on a compile failure, any spill, a packed-weight or scale load narrower than 32 bits,
or a fused-MoE decode step (1 and 8 tokens, each weight branch) predicted below 80% of
GB10's bandwidth. No GPU is used; every figure is an estimate of the model in ``model.py``.
"""

from __future__ import annotations

import os

os.environ.pop("TRITON_INTERPRET", None)  # before anything imports Triton

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from bench.targets.kernel_static import build, model  # noqa: E402
from bench.targets.kernel_static.analyze import Report, analyze  # noqa: E402
from bench.targets.kernel_static.launches import MOE_CASES, record_launches  # noqa: E402

MIN_SHARE = 0.80
JUDGED_TOKENS = (1, 8)


def decode_shares(reports: list[Report], arch: int) -> dict[str, dict[str, float]]:
    """``{case: {branch: share}}``: a decode step's bytes-at-bandwidth time over its
    predicted time, summed over the launches of the case (gate+up and down)."""
    sums: dict[str, dict[str, list[float]]] = {}
    for rep in reports:
        if rep.built.arch != arch:
            continue
        for loop in rep.loops:
            if loop.roof is None:
                continue
            branch = "fp4" if any(a.startswith("f_") for a in loop.args) else "w2"
            acc = sums.setdefault(rep.launch.case, {}).setdefault(branch, [0.0, 0.0])
            acc[0] += loop.roof.memory_us
            acc[1] += loop.roof.time_us
    return {case: {b: m / t for b, (m, t) in branches.items()} for case, branches in sums.items()}


def _loads_summary(rep: Report) -> str:
    counts: dict[tuple[str, int, int], int] = {}
    for w in rep.loads:
        key = (w.opcode, w.line, w.lines_per_warp)
        counts[key] = counts.get(key, 0) + 1
    return "; ".join(
        f"{n}x {op} L{line} ({lines} lines/warp)"
        for (op, line, lines), n in sorted(counts.items(), key=lambda kv: kv[0][1])
    )


def print_report(reports: list[Report]) -> list[str]:
    """Print the tables; return the failures."""
    failures: list[str] = []
    print(
        "\nper kernel and target (regs/thread; spill bytes stored/loaded; dynamic smem per "
        "CTA; resident CTAs per SM and what limits them; warps / max warps per SM):"
    )
    print(
        f"{'kernel [case]':58} {'sm':>4} {'regs':>4} {'spill':>9} {'smem':>7} "
        f"{'CTAs/SM':>20} {'occ':>4} {'w':>2}/{'st':<2} {'s':>5}"
    )
    for rep in reports:
        b, name = rep.built, rep.launch.name
        cases = name if len(name) <= 58 else name[:55] + "..."
        if not b.ok:
            print(f"{cases:58} {b.arch:>4} COMPILE FAILED: {b.error[:300]}")
            failures.append(f"{name} sm_{b.arch}: compile failed")
            continue
        print(
            f"{cases:58} {b.arch:>4} {b.regs:>4} {b.spill_stores:>4}/{b.spill_loads:<4} "
            f"{b.shared / 1024:6.1f}K {rep.ctas:>3} ({rep.limiter:>13}) "
            f"{100 * rep.occupancy:3.0f}% {b.num_warps:>2}/{b.num_stages:<2} "
            f"{'cache' if b.cached else f'{b.seconds:.1f}':>5}"
        )
        if b.spill_stores or b.spill_loads:
            failures.append(f"{name} sm_{b.arch}: spills {b.spill_stores}/{b.spill_loads} B")
        if rep.loads:
            print(f"    packed weight/scale loads: {_loads_summary(rep)}")
        if rep.narrow:
            widths = sorted({w.opcode for w in rep.narrow})
            failures.append(
                f"{name} sm_{b.arch}: {len(rep.narrow)} packed weight/scale "
                f"loads narrower than 32 bits ({', '.join(widths)})"
            )
    print(
        "\nhot loops of the fused MoE decode (one loop body = one K step; per warp: SASS "
        "instructions, L1 wavefronts; the roofline's four bounds in us):"
    )
    print(
        f"{'kernel [case]':44} {'sm':>4} {'branch':30} {'instr':>5} {'wave':>5} {'iters':>5} "
        f"{'CTAs':>5} {'MB':>6} {'memory':>7} {'issue':>7} {'L1':>7} {'latency':>7} bound"
    )
    for rep in reports:
        for loop in rep.loops:
            if loop.roof is None:
                continue
            c, r = loop.cost, loop.roof
            print(
                f"{rep.launch.name[:44]:44} {rep.built.arch:>4} {','.join(loop.args)[:30]:30} "
                f"{c.instructions:5} {c.wavefronts:5} {c.iterations:5} {c.ctas:5} "
                f"{c.bytes / 1e6:6.1f} {r.memory_us:7.1f} {r.issue_us:7.1f} {r.l1_us:7.1f} "
                f"{r.latency_us:7.1f} {r.bound}"
            )
    gb10 = decode_shares(reports, 121)
    for case, tokens, _pool in MOE_CASES:
        if (
            tokens in JUDGED_TOKENS
            and case not in gb10
            and any(rep.built.arch == 121 for rep in reports)
        ):
            failures.append(
                f"{case}: no hot loop reading expert weights found on sm_121, so "
                "no bandwidth prediction"
            )
    for arch in sorted({rep.built.arch for rep in reports}, reverse=True):
        dev = model.DEVICES[arch]
        print(f"\npredicted share of {dev.name} bandwidth, decode step (gate+up and down):")
        for case, branches in decode_shares(reports, arch).items():
            for branch, share in branches.items():
                judged = arch == 121 and any(
                    case.startswith(f"moe decode T={t}")
                    and case[len(f"moe decode T={t}") :][:1] in ("", " ")
                    for t in JUDGED_TOKENS
                )
                ok = share >= MIN_SHARE or not judged
                print(
                    f"  {case:24} {branch:4} {100 * share:5.1f}%"
                    f"{'' if not judged else ' (target >= 80%)' if ok else ' FAIL (< 80%)'}"
                )
                if not ok:
                    failures.append(
                        f"{case} {branch} on {dev.name}: predicted "
                        f"{100 * share:.0f}% of bandwidth (< 80%)"
                    )
    return failures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.targets.kernel_static", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--jobs", type=int, default=2, help="compile processes (CI has 2 cores)")
    ap.add_argument(
        "--cache-dir",
        default=str(build.DEFAULT_CACHE),
        help="compile results by kernels' source hash (default %(default)s)",
    )
    ap.add_argument("--no-cache", action="store_true", help="compile everything afresh")
    ap.add_argument("--json", type=Path, help="also write the figures here (moe_traffic.py)")
    ap.add_argument(
        "--arch",
        type=int,
        action="append",
        choices=sorted(model.DEVICES),
        help="targets (default: 121 and 90)",
    )
    args = ap.parse_args(argv)
    started = time.monotonic()
    build.check_triton_version()
    archs = tuple(args.arch or (121, 90))
    launches = record_launches()
    print(
        f"kernel_static: {len(launches)} launch specializations x {len(archs)} targets, "
        f"triton {build.TRITON_VERSION}, {args.jobs} processes; no GPU: all figures are "
        "estimates from the machine code"
    )
    for arch in archs:
        print(f"  assumed {model.DEVICES[arch].describe()}")
    built = build.build_all(launches, archs, args.jobs, None if args.no_cache else args.cache_dir)
    by_name = {launch.name: launch for launch in launches}
    reports = [analyze(by_name[b.launch], b) for b in built]
    failures = print_report(reports)
    seconds = time.monotonic() - started
    figures = json.dumps(
        {
            "triton": build.TRITON_VERSION,
            "kernels_hash": build.kernels_hash(),
            "seconds": round(seconds, 1),
            "device": model.GB10.describe(),
            "decode_share": decode_shares(reports, 121),
            "failures": failures,
        },
        indent=1,
    )
    if args.json:
        args.json.write_text(figures)
    if not args.no_cache and 121 in archs:
        path = build.report_path(Path(args.cache_dir))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(figures)
    print(f"\n{'FAIL' if failures else 'PASS'}: {len(failures)} failures in {seconds:.0f} s")
    for f in failures:
        print(f"  FAIL {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
