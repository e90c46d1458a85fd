"""Memory traffic and launches of the fused W2 MoE per decode step, measured on a CPU.

Run: ``python -m bench.targets.moe_traffic`` from the repository root (about a minute).

1. **Measured** in Triton's interpreter at scaled-down widths: every ``tl.load`` of every
   program is recorded (address, mask, element size). Two counts:
   *program bytes* = per program, the distinct bytes it loads, summed over programs (what
   the programs ask of L2: re-reads across programs count again); *launch bytes* = distinct
   bytes over the whole launch (what DRAM sees when re-reads hit L2: the activations, ids and
   tables re-read by many programs are a few KiB). Launches are counted by wrapping the
   interpreter's kernel launch and by a ``TorchDispatchMode`` over the torch ops around them
   (views and allocations excluded: they launch nothing).
2. **Model**: the same counts computed from the grid and the kernels' loads
   (:func:`model_traffic`), checked equal to the measurement, then evaluated at
   GLM-5.3-Flash's widths (hidden 4096, experts 2048 wide, 288 experts, top-8).
Also per rank at TP=2 and EP=2 (:func:`sharded`): measured against the rank's minimum at the
bench's widths, and the bytes per MoE layer and rank at GLM-5.3-Flash's.
3. **Estimate**: the decode rate on a GB10 from GLM-5.3-Flash's per-token bytes at 233 GB/s
   usable (peers measured 231-240), labelled as an estimate: nothing here ran on a GPU. Twice:
   a ceiling (every byte at full bandwidth) and a prediction that reads the routed experts
   at the fused MoE's predicted share of bandwidth from the static kernel check
   (``python -m bench.targets.kernel_static``; its report for the current ``kernels/`` sources, or
   ``--static-json``), at 1 token and for a k=7 verify step (its 8-token figure). What the
   projection leaves out is printed with it (attention, the host step, the drafter's passes).

The minimum a step must read is the codes and scales of the distinct routed experts (the
FP4 bytes for pooled ones). Targets: launch bytes <= 1.1x the minimum, <= 3 launches.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __name__ == "__main__" and os.environ.get("TRITON_INTERPRET") != "1":
    # The interpreter must be chosen before Triton is imported.
    os.environ["TRITON_INTERPRET"] = "1"
    os.execv(sys.executable, [sys.executable, "-m", "bench.targets.moe_traffic", *sys.argv[1:]])


import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from kernels import w2_moe  # noqa: E402
from kernels.w2_moe_layout import MoEWeights  # noqa: E402
from tests.support.moe_layers import random_moe_weights  # noqa: E402

W2_BYTES_PER_WEIGHT = 1 / 4 + 1 / 32  # 2-bit codes, one ue5m3 byte per 32
FP4_BYTES_PER_WEIGHT = 1 / 2 + 1 / 16  # e2m1 nibbles, one e4m3 byte per 16
GB10_GBPS = 233.0  # usable LPDDR5x bandwidth peers measured with saturating reads (231-240)

# GLM-5.3-Flash (../shared/notes/glm53-flash.md, quant-and-kernels.md).
GLM_HIDDEN, GLM_INTER, GLM_EXPERTS, GLM_TOPK, GLM_MOE_LAYERS = 4096, 2048, 288, 8, 42
GLM_NON_EXPERT_BF16_PARAMS = 5.48e9  # non-expert 8.1B of which 2.62B FP8 (per token, once)
GLM_NON_EXPERT_FP8_PARAMS = 2.62e9
GLM_KDA_STATE_BYTES = 132 * 2**20  # recurrent state read + written per step (fp32)
GLM_DRAFTER_BYTES = 2.352e9  # DFlash2, BF16

_NO_KERNEL = {
    "view",
    "_unsafe_view",
    "reshape",
    "as_strided",
    "expand",
    "t",
    "transpose",
    "permute",
    "slice",
    "select",
    "unsqueeze",
    "squeeze",
    "alias",
    "detach",
    "empty",
    "empty_strided",
    "empty_like",
    "lift_fresh",
    "_reshape_alias",
}


def expert_bytes(hidden: int, inter: int, pooled: bool) -> int:
    """Codes + scales of one expert's three matrices (+ three FP4 global scales)."""
    weights = 3 * hidden * inter
    if pooled:
        return int(weights * FP4_BYTES_PER_WEIGHT) + 3 * 4
    return int(weights * W2_BYTES_PER_WEIGHT)


@dataclass
class Traffic:
    program_bytes: int = 0
    launch_bytes: int = 0
    launches: list[str] = field(default_factory=list)


# -- measured: the interpreter's loads --------------------------------------------------


@contextmanager
def recorded() -> Iterator[Traffic]:
    """Record loads and launches of the fused MoE (interpreter only)."""
    from triton.runtime import interpreter

    traffic = Traffic()
    launch_addrs: list[np.ndarray] = []
    program_addrs: list[np.ndarray] = []
    builder_cls = interpreter.InterpreterBuilder
    fn_cls = interpreter.InterpretedFunction
    orig_load, orig_run = builder_cls.create_masked_load, fn_cls.run
    orig_program = (
        interpreter.GridExecutor.__call__ if hasattr(interpreter, "GridExecutor") else None
    )

    def load(self: Any, ptrs: Any, mask: Any, other: Any, *args: Any) -> Any:
        size = np.dtype(interpreter._get_np_dtype(ptrs.get_element_ty())).itemsize
        addr = np.asarray(ptrs.data).reshape(-1)[np.asarray(mask.data).reshape(-1)]
        program_addrs.append((addr[:, None] + np.arange(size)[None, :]).reshape(-1))
        return orig_load(self, ptrs, mask, other, *args)

    def flush_program() -> None:
        if program_addrs:
            unique = np.unique(np.concatenate(program_addrs))
            traffic.program_bytes += int(unique.size)
            launch_addrs.append(unique)
            program_addrs.clear()

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        traffic.launches.append(self.fn.__name__)
        torch_ops.inside = True  # the interpreter's own tensor copies are not launches
        try:
            out = orig_run(self, *args, **kwargs)
        finally:
            torch_ops.inside = False
        flush_program()
        if launch_addrs:
            traffic.launch_bytes += int(np.unique(np.concatenate(launch_addrs)).size)
            launch_addrs.clear()
        return out

    torch_ops = _TorchLaunches(traffic)
    builder_cls.create_masked_load = load
    fn_cls.run = run
    patched_grid = None
    if orig_program is not None:
        # Programs run one after another: the first op of each program flushes the last.
        orig_set = interpreter.InterpreterBuilder.set_grid_idx

        def set_grid_idx(self: Any, x: int, y: int, z: int) -> Any:
            flush_program()
            return orig_set(self, x, y, z)

        interpreter.InterpreterBuilder.set_grid_idx = set_grid_idx
        patched_grid = orig_set
    try:
        with torch_ops:
            yield traffic
    finally:
        builder_cls.create_masked_load = orig_load
        fn_cls.run = orig_run
        if patched_grid is not None:
            interpreter.InterpreterBuilder.set_grid_idx = patched_grid


class _TorchLaunches(TorchDispatchMode):  # type: ignore[no-untyped-call]
    def __init__(self, traffic: Traffic) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.traffic = traffic
        self.inside = False

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func.overloadpacket.__name__
        if name not in _NO_KERNEL and not self.inside:
            self.traffic.launches.append(f"aten.{name}")
        return func(*args, **(kwargs or {}))


# -- model: the same counts from the grid and the kernels' loads ------------------------


def model_traffic(
    ids: torch.Tensor,
    slot: torch.Tensor,
    hidden: int,
    inter: int,
    x_size: int,
    cfg: w2_moe.TileConfig,
    id_size: int = 4,
    has_pool: bool = True,
) -> Traffic:
    """Program and launch bytes of the decode path, from what each program loads."""
    if cfg.aligned:
        raise ValueError("the model covers the decode path (a decode step)")
    tokens, top_k = ids.shape
    n = tokens * top_k
    flat = ids.reshape(-1).tolist()
    experts = sorted(set(flat))
    pairs_of = {e: flat.count(e) for e in experts}
    pooled = {e for e in experts if int(slot[e]) >= 0}
    # gate+up programs take block_n / 2 gate rows and as many up rows; down takes block_n.
    half = cfg.block_n // 2
    nb_gu, nb_d = -(-inter // half), -(-hidden // cfg.block_n)
    pool_scalar = 4 if has_pool else 0
    t = Traffic(launches=["_gate_up_kernel", "_down_kernel", "_sum_kernel"])

    def rows_in(block: int, total: int, per_block: int) -> int:
        return min(per_block, total - block * per_block)

    def w_bytes(rows: int, width: int, fp4: bool) -> int:
        if fp4:
            return rows * (width // 2 + width // 16)
        return rows * (width // 4 + width // 32)

    ids_bytes = n * id_size
    # gate+up: every program loads the ids; active ones x rows, both halves, slot, globals.
    t.program_bytes += n * nb_gu * ids_bytes
    for e in experts:
        fp4 = e in pooled
        for b in range(nb_gu):
            rows = rows_in(b, inter, half)
            t.program_bytes += (
                pool_scalar
                + pairs_of[e] * hidden * x_size
                + 2 * w_bytes(rows, hidden, fp4)
                + (8 if fp4 else 0)
            )
    routed_tokens = len({i // top_k for i in range(n)})
    t.launch_bytes += (
        ids_bytes
        + pool_scalar * len(experts)
        + routed_tokens * hidden * x_size
        + sum(2 * w_bytes(inter, hidden, e in pooled) + 8 * (e in pooled) for e in experts)
    )
    # down: ids everywhere; active: act rows, router weights, codes, slot, global.
    t.program_bytes += n * nb_d * ids_bytes
    for e in experts:
        fp4 = e in pooled
        for b in range(nb_d):
            rows = rows_in(b, hidden, cfg.block_n)
            t.program_bytes += (
                pool_scalar
                + pairs_of[e] * (inter * x_size + 4)
                + w_bytes(rows, inter, fp4)
                + (4 if fp4 else 0)
            )
    t.launch_bytes += (
        ids_bytes
        + pool_scalar * len(experts)
        + n * (inter * x_size + 4)
        + sum(w_bytes(hidden, inter, e in pooled) + 4 * (e in pooled) for e in experts)
    )
    # sum over top_k: the per-pair rows, once.
    t.program_bytes += n * hidden * x_size
    t.launch_bytes += n * hidden * x_size
    return t


def minimum_bytes(ids: torch.Tensor, slot: torch.Tensor, hidden: int, inter: int) -> int:
    return sum(
        expert_bytes(hidden, inter, int(slot[e]) >= 0) for e in set(ids.reshape(-1).tolist())
    )


# -- the bench ---------------------------------------------------------------------------


def decode_routing(tokens: int, experts: int, top_k: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randperm(experts, generator=g)[:top_k] for _ in range(tokens)]).to(
        torch.int32
    )


def measure(w: MoEWeights, ids: torch.Tensor, expert_map: torch.Tensor | None = None) -> Traffic:
    x = torch.randn(ids.shape[0], w.hidden)
    wts = torch.rand(ids.shape, dtype=torch.float32)
    counts = torch.zeros(w.num_experts, dtype=torch.int64)
    with recorded() as traffic:
        w2_moe.w2_fused_moe(x, wts, ids, w, 10.0, False, counts, expert_map=expert_map)
    return traffic


def sharded(hidden: int, inter: int, experts: int, quick: bool = False) -> list[str]:
    """Per-rank traffic at TP=2 and EP=2 (decode, 1 token and a k=7 verify step, no pool):
    measured in the interpreter at the bench's widths against that rank's minimum, and the
    minimum bytes per token per rank at GLM-5.3-Flash's widths. TP: every routed expert,
    half its width on each rank. EP: rank 0 holds experts [0, E/2) (vLLM's linear
    placement); the step waits for the busier rank, so GLM's figure is E[max over ranks]
    over 200 random routings. ``quick``: the verify step at GLM's widths only."""
    lines = []
    half = experts // 2
    for tokens, label in ((1, "1 token"), (8, "k=7 verify")):
        ids = decode_routing(tokens, experts, GLM_TOPK, seed=tokens)
        if quick and tokens > 1:
            lines += _glm_sharded(tokens, label)
            continue
        tp = random_moe_weights(experts, hidden, inter // 2, (), seed=tokens)
        got = measure(tp, ids)
        low = minimum_bytes(ids, tp.expert_slot, hidden, inter // 2)
        lines.append(
            f"  TP=2 {label:11} rank 0: launch bytes {got.launch_bytes / low:.3f}x "
            f"its minimum {low:,}; {len(got.launches)} launches"
        )
        ep = random_moe_weights(half, hidden, inter, (), seed=tokens)
        expert_map = torch.full((experts,), -1, dtype=torch.int32)
        expert_map[:half] = torch.arange(half, dtype=torch.int32)
        got = measure(ep, ids, expert_map)
        local = ids[ids < half]
        low = minimum_bytes(local, ep.expert_slot, hidden, inter)
        lines.append(
            f"  EP=2 {label:11} rank 0 ({len(set(local.tolist()))} of "
            f"{len(set(ids.reshape(-1).tolist()))} distinct experts local): launch "
            f"bytes {got.launch_bytes / max(low, 1):.3f}x its minimum {low:,}; "
            f"{len(got.launches)} launches"
        )
        lines += _glm_sharded(tokens, label)
    return lines


def _glm_sharded(tokens: int, label: str) -> list[str]:
    """GLM-5.3-Flash's routed-expert bytes per MoE layer and rank (no pool), 200 routings."""
    one = expert_bytes(GLM_HIDDEN, GLM_INTER, False)
    distinct, busier = [], []
    for seed in range(200):
        glm = set(
            decode_routing(tokens, GLM_EXPERTS, GLM_TOPK, seed=1000 + seed).reshape(-1).tolist()
        )
        low0 = sum(e < GLM_EXPERTS // 2 for e in glm)
        distinct.append(len(glm))
        busier.append(max(low0, len(glm) - low0))
    d, b = float(np.mean(distinct)), float(np.mean(busier))
    return [
        f"  GLM-5.3-Flash {label:11} routed-expert bytes per MoE layer and rank: one rank "
        f"{d * one / 1e6:.2f} MB; TP=2 "
        f"{d * expert_bytes(GLM_HIDDEN, GLM_INTER // 2, False) / 1e6:.2f} MB; EP=2 busier "
        f"rank {b * one / 1e6:.2f} MB (E[max] {b:.2f} of {d:.2f} experts)"
    ]


def pooled_for(ids: torch.Tensor, experts: int, n_pool: int) -> tuple[int, ...]:
    """Half the pool on routed experts (so both branches run), half elsewhere."""
    routed = sorted(set(ids.reshape(-1).tolist()))
    others = [e for e in range(experts) if e not in routed]
    return tuple(routed[: n_pool // 2] + others[: n_pool - n_pool // 2])


def projection(coverage: float, distinct_per_layer: float | None) -> dict[str, tuple[float, float]]:
    """``{variant: (other bytes, routed-expert bytes)}`` of one step on a GB10 (an estimate).
    ``distinct_per_layer`` None: plain decode; else a verify step (drafter bytes added)."""
    w2 = expert_bytes(GLM_HIDDEN, GLM_INTER, False)
    fp4 = expert_bytes(GLM_HIDDEN, GLM_INTER, True)
    per_expert = w2 + coverage * (fp4 - w2)
    out: dict[str, tuple[float, float]] = {}
    for name, bf16_bytes in (("bf16 linears decoded", 2.0), ("bf16 linears P12-packed", 1.5)):
        non_expert = (
            GLM_NON_EXPERT_BF16_PARAMS * bf16_bytes
            + GLM_NON_EXPERT_FP8_PARAMS
            + GLM_KDA_STATE_BYTES
        )
        if distinct_per_layer is None:
            out[name] = (non_expert, GLM_TOPK * GLM_MOE_LAYERS * per_expert)
        else:
            out[name] = (
                non_expert + GLM_DRAFTER_BYTES,
                distinct_per_layer * GLM_MOE_LAYERS * per_expert,
            )
    return out


def static_shares(path: Path | None) -> tuple[dict[int, float] | None, str]:
    """The fused MoE's predicted share of GB10 bandwidth for a decode step at 1 and 8 tokens
    (W2 experts), from the static check's figures for the current ``kernels/`` sources:
    ``({tokens: share}, where from)``, or ``(None, why not)``."""
    from bench.targets.kernel_static.build import kernels_hash, report_path

    path = path or report_path()
    if not path.exists():
        return None, (
            f"no static-check figures for the current kernels at {path}: run "
            "`python -m bench.targets.kernel_static` first"
        )
    data = json.loads(path.read_text())
    if data.get("kernels_hash") != kernels_hash():
        return None, f"{path} was made from other kernels/ sources (rerun the static check)"
    shares = data.get("decode_share", {})
    try:
        got = {t: float(shares[f"moe decode T={t}"]["w2"]) for t in (1, 8)}
    except (KeyError, TypeError, ValueError):
        return None, f"{path} has no W2 decode shares at 1 and 8 tokens"
    return got, f"static check ({path.name}, triton {data.get('triton')})"


LEFT_OUT = (
    "attention compute (MLA/DSA and KDA: only the KDA state's bytes are counted, no "
    "KV-cache reads), the host step (scheduling, sampling, Python between launches), "
    "the drafter's forward passes (only its weight bytes are counted, read once at "
    "full bandwidth), launch gaps; non-expert weights are read at full bandwidth"
)


def print_projection(shares: dict[int, float] | None, source: str) -> None:
    """Per-token rates from bytes at full bandwidth, and with the routed experts read at the
    fused MoE's predicted share (1 token: its decode figure; a k=7 verify step: its 8-token
    figure)."""
    print(
        f"\nESTIMATE, not measured: GLM-5.3-Flash decode on one GB10 at {GB10_GBPS:.0f} GB/s "
        "usable. 'ceiling': every byte read once at full bandwidth (launch bytes ~1.00x "
        "above); 'predicted': routed-expert bytes at the fused MoE's predicted share of "
        f"bandwidth, {source}"
    )
    if shares is not None:
        print(
            f"  predicted share: {100 * shares[1]:.0f}% at 1 token, {100 * shares[8]:.0f}% "
            "at 8 tokens (k=7 verify)"
        )
    print(f"  left out: {LEFT_OUT}")
    bw = GB10_GBPS * 1e9
    for coverage in (0.0, 0.03):
        plain = projection(coverage, None)
        verify = projection(coverage, 30)
        for name, (other, experts) in plain.items():
            v_other, v_experts = verify[name]
            rates = [("ceiling", 1.0, 1.0)]
            if shares is not None:
                rates.append(("predicted", shares[1], shares[8]))
            for label, s1, s8 in rates:
                tok_s = 1 / (other / bw + experts / (bw * s1))
                step_ms = (v_other / bw + v_experts / (bw * s8)) * 1e3
                print(
                    f"  pool coverage {100 * coverage:3.0f}%, {name:24} {label:9}: "
                    f"{(other + experts) / 1e9:5.2f} GB/token -> {tok_s:5.1f} tok/s; DFlash2 "
                    f"k=7 verify (30 distinct experts/layer) {step_ms:5.1f} ms/step -> "
                    f"{5.5 * 1e3 / step_ms:5.1f} tok/s at 5.5 accepted"
                )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--inter", type=int, default=256)
    ap.add_argument("--experts", type=int, default=64)
    ap.add_argument("--pool", type=int, default=4, help="pooled experts in the layer")
    ap.add_argument("--quick", action="store_true", help="tiny widths (for the test)")
    ap.add_argument(
        "--static-json",
        type=Path,
        help="the static check's figures (default: its report for the current "
        "kernels in its cache, written by "
        "`python -m bench.targets.kernel_static`)",
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.hidden, args.inter, args.experts = 128, 64, 16
    ok = True
    rows = []
    for tokens, label in ((1, "decode, 1 token"), (8, "k=7 verify, 8 tokens")):
        ids = decode_routing(tokens, args.experts, GLM_TOPK, seed=tokens)
        pooled = pooled_for(ids, args.experts, args.pool)
        w = random_moe_weights(args.experts, args.hidden, args.inter, pooled, seed=tokens)
        cfg = w2_moe.tile_config(ids.numel())
        got = measure(w, ids)
        model = model_traffic(ids, w.expert_slot, args.hidden, args.inter, 4, cfg)
        minimum = minimum_bytes(ids, w.expert_slot, args.hidden, args.inter)
        agree = (got.program_bytes, got.launch_bytes) == (model.program_bytes, model.launch_bytes)
        ok &= agree
        rows.append((label, ids, got, model, minimum, agree))
    print(
        f"fused W2 MoE, decode path, measured in Triton's interpreter at hidden "
        f"{args.hidden}, expert width {args.inter}, {args.experts} experts, top-{GLM_TOPK}, "
        f"{args.pool} pooled (float32 activations):"
    )
    print(
        f"{'step':24} {'distinct':>8} {'launches':>8} {'min bytes':>11} {'launch bytes':>13} "
        f"{'ratio':>6} {'program bytes':>14} {'ratio':>6} {'model':>6}"
    )
    for label, ids, got, _model, minimum, agree in rows:
        distinct = len(set(ids.reshape(-1).tolist()))
        print(
            f"{label:24} {distinct:8} {len(got.launches):8} {minimum:11,} "
            f"{got.launch_bytes:13,} {got.launch_bytes / minimum:6.3f} "
            f"{got.program_bytes:14,} {got.program_bytes / minimum:6.3f} "
            f"{'same' if agree else 'DIFFERS':>6}"
        )
        ok &= len(got.launches) <= 3
    print(f"launches: {', '.join(rows[0][2].launches)}")
    ids = decode_routing(16, args.experts, GLM_TOPK, seed=16)
    w = random_moe_weights(
        args.experts, args.hidden, args.inter, pooled_for(ids, args.experts, args.pool), seed=16
    )
    prefill = measure(w, ids)
    torch_ops = [name for name in prefill.launches if name.startswith("aten.")]
    print(
        f"prefill, 16 tokens ({ids.numel()} pairs, aligned path): {len(prefill.launches)} "
        f"launches = {len(torch_ops)} torch ops aligning the routing on the device "
        f"({', '.join(sorted(set(torch_ops)))}) + 3 kernels; no target"
    )
    print(
        "\nthe model (equal to the measurement above) at GLM-5.3-Flash's widths "
        f"(hidden {GLM_HIDDEN}, width {GLM_INTER}, {GLM_EXPERTS} experts, bf16 activations):"
    )
    for tokens, label in ((1, "decode, 1 token"), (8, "k=7 verify, 8 tokens")):
        ids = decode_routing(tokens, GLM_EXPERTS, GLM_TOPK, seed=tokens)
        slot = torch.full((GLM_EXPERTS,), -1, dtype=torch.int32)
        slot[list(pooled_for(ids, GLM_EXPERTS, 4))] = torch.arange(4, dtype=torch.int32)
        cfg = w2_moe.tile_config(ids.numel())
        model = model_traffic(ids, slot, GLM_HIDDEN, GLM_INTER, 2, cfg)
        minimum = minimum_bytes(ids, slot, GLM_HIDDEN, GLM_INTER)
        launch_ratio = model.launch_bytes / minimum
        print(
            f"  {label:22} minimum {minimum / 1e6:7.2f} MB; launch bytes "
            f"{launch_ratio:.4f}x; program bytes {model.program_bytes / minimum:.4f}x; "
            f"3 launches"
        )
        ok &= launch_ratio <= 1.1
    print("\nsharded over 2 ranks (per rank; the model above is one rank's):")
    print("\n".join(sharded(args.hidden, args.inter, args.experts, args.quick)))
    print_projection(*static_shares(args.static_json))
    print("\nPASS" if ok else "\nFAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
