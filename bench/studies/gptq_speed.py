"""GPTQ speed, side by side in one run: the current code against the previous one and the textbook.

Every matrix ``[out, in]`` is quantized against the same Hessian (correlated inputs of uneven
importance) by:

* ``previous``: the converter's GPTQ (act-order, Hessian-weighted ue5m3 scales, one refit
  round) as it was before it was made fast, kept as ``tests.engine.quant.gptq_previous``
  (``gptq_quantize_reference``: a 13-candidate rounding of every weight, an einsum refit,
  four exact losses); for scale, the rule before it (RTN scales, no refit) is timed too;
* ``ours``: ``engine.quant.gptq.gptq_quantize`` with the same options, timed as the
  converter uses it (codes and scales), then ``+ loss``: also reading ``result.loss``;
* ``expert`` (``--against expert``): one routed expert of width ``--expert HIDDENxINTER``
  (default GLM-5.3-Flash's 4096x2048) as the converter does it, gate, up and down each with
  its output error: before, every matrix factored its Hessian and the output error took two
  ``[out, in] x [in, in]`` products; now the layer's shared gate/up Hessian is factored once
  (its cost printed apart: paid once per 288 experts) and the error comes from GPTQ's sums;
* ``textbook`` (``--against previous,textbook``): ``gptq_reference``, the unblocked column
  loop with the RTN scale rule and no act-order, against ``gptq_quantize`` with the same
  rule (the check that the lazy updates are fast; slow by design: 6-10 minutes at 2048x4096).

Prints wall and CPU seconds, the ratios, how many codes and scales agree and the relative
difference of the losses. Default shapes: SmolLM2-135M's MLP (gate/up 1536x576, down
576x1536) and a GLM-5.3-Flash expert (gate/up 2048x4096, down 4096x2048).
``--smollm2 12,13,14`` instead quantizes the real MLP matrices of those SmolLM2-135M layers
with Hessians from one pass of the fidelity bench's calibration text
(``bench/studies/quant_fidelity_smollm2.py``: 64 x 256 tokens), the 9 matrices of its mild setting.

    .venv/bin/python -m bench.studies.gptq_speed [--shapes 1536x576,2048x4096] [--threads 1]
                                         [--against previous,textbook] [--device cpu]
                                         [--smollm2 12,13,14] [--expert 4096x2048]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import TypeVar

import torch

from engine.quant.gptq import (
    GPTQResult,
    HessianFactor,
    factor_hessian,
    gptq_quantize,
    gptq_reference,
    output_error,
)
from tests.engine.quant.gptq_previous import gptq_quantize_reference

T = TypeVar("T")
DEFAULT_SHAPES = "1536x576,576x1536,2048x4096,4096x2048"


def problem(
    out_f: int, in_f: int, tokens: int, dev: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(out_f, in_f, generator=gen) * 0.02
    # Correlated inputs with uneven importance, built cheaply from a low-rank mix.
    z = torch.randn(tokens, 256, generator=gen)
    mix = torch.randn(256, in_f, generator=gen) / 16
    x = z @ mix + 0.3 * torch.randn(tokens, in_f, generator=gen) * torch.exp(
        torch.randn(in_f, generator=gen)
    )
    return w.to(dev), (2 * x.t() @ x / tokens).to(dev)


def smollm2_problems(
    layers: list[int], dev: torch.device
) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """The real MLP weights of ``layers`` with their calibration Hessians."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bench.corpora.fidelity_protocol import protocol
    from bench.studies.quant_fidelity_smollm2 import hessians_of_pass, mlp_weights, model_dir

    path = model_dir(None)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.train(False)
    calib, _code, _prose = protocol(AutoTokenizer.from_pretrained(path))
    accs = hessians_of_pass(model, calib, layers)
    out = []
    for name, w in mlp_weights(model, layers).items():
        layer, proj = name.split(".")
        h = accs[f"{layer}.{'d' if proj == 'down_proj' else 'x'}"].hessian
        out.append((f"layer {layer} {proj}", w.to(dev), h.to(dev)))
    return out


def timed(fn: Callable[[], T], dev: torch.device) -> tuple[T, float, float]:
    """Result, wall seconds, CPU seconds of this process."""
    if dev.type == "cuda":
        torch.cuda.synchronize()
    t0, c0 = time.perf_counter(), time.process_time()
    result = fn()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return result, time.perf_counter() - t0, time.process_time() - c0


def agreement(a: GPTQResult, b: GPTQResult) -> str:
    codes = 100 * float((a.codes == b.codes).float().mean())
    scales = 100 * float((a.scales == b.scales).float().mean())
    rel = abs(a.loss - b.loss) / abs(a.loss) if a.loss else 0.0
    return f"codes {codes:.4f}% scales {scales:.4f}% loss rel diff {rel:.1e}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, help="comma list of OUTxIN")
    parser.add_argument("--tokens", type=int, default=2048, help="calibration rows for H")
    parser.add_argument("--against", default="previous", help="previous, textbook or both")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--smollm2", help="comma list of SmolLM2-135M layers (replaces --shapes)")
    parser.add_argument(
        "--expert", default="4096x2048", help="HIDDENxINTER of the expert --against expert converts"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    against = set(args.against.split(","))
    print(f"{dev}, {torch.get_num_threads()} torch threads; act-order, weighted scales, 1 refit")
    if "expert" in against:
        hidden, inter = (int(d) for d in args.expert.lower().split("x"))
        compare_expert(hidden, inter, args.tokens, dev)
        if against == {"expert"}:
            return
    if args.smollm2:
        problems = smollm2_problems([int(i) for i in args.smollm2.split(",")], dev)
    else:
        problems = []
        for shape in args.shapes.split(","):
            out_f, in_f = (int(d) for d in shape.lower().split("x"))
            problems.append((shape, *problem(out_f, in_f, args.tokens, dev)))
    totals = [0.0, 0.0]
    for label, w, h in problems:
        print(f"\n{label} ({w.shape[0]}x{w.shape[1]}):", flush=True)
        previous, ours = compare(w, h, against, dev)
        totals[0] += previous
        totals[1] += ours
    if "previous" in against:
        print(
            f"\nall {len(problems)} matrices: previous {totals[0]:.2f} s, ours "
            f"{totals[1]:.2f} s wall ({totals[0] / totals[1]:.2f}x)"
        )


def compare(
    w: torch.Tensor, h: torch.Tensor, against: set[str], dev: torch.device
) -> tuple[float, float]:
    """Print one matrix's timings; return the wall seconds of previous and ours."""
    wp = wo = 0.0
    if "previous" in against:
        prev, wp, cp = timed(lambda: gptq_quantize_reference(w, h, act_order=True), dev)
        ours, wo, co = timed(lambda: gptq_quantize(w, h, act_order=True), dev)
        _loss, wl, _ = timed(lambda: ours.loss, dev)
        _plain, wr, cr = timed(
            lambda: gptq_quantize(w, h, act_order=True, scales="rtn", refit=0), dev
        )
        print(f"  RTN scale rule, no refit (the rule before): {wr:.2f} s wall {cr:.2f} s CPU")
        print(f"  previous {wp:7.2f} s wall {cp:7.2f} s CPU")
        print(
            f"  ours     {wo:7.2f} s wall {co:7.2f} s CPU  ({wp / wo:.2f}x wall, "
            f"{cp / co:.2f}x CPU); + loss {wl:.2f} s ({wp / (wo + wl):.2f}x wall)"
        )
        print(f"  {agreement(prev, ours)}", flush=True)
    if "textbook" in against:
        ref, wr, _ = timed(lambda: gptq_reference(w, h), dev)
        fast, wf, _ = timed(lambda: gptq_quantize(w, h, scales="rtn", refit=0), dev)
        print(
            f"  textbook loop {wr:7.2f} s, blocked {wf:7.2f} s ({wr / wf:.2f}x); "
            f"{agreement(ref, fast)}",
            flush=True,
        )
    return wp, wo


def compare_expert(hidden: int, inter: int, tokens: int, dev: torch.device) -> None:
    """One expert, before and after the shared factor and the product-free output error."""
    gate, h = problem(inter, hidden, tokens, dev)
    up = torch.randn(gate.shape, generator=torch.Generator().manual_seed(1)).to(dev) * 0.02
    down, hd = problem(hidden, inter, tokens, dev)
    print(f"\none expert, hidden {hidden}, intermediate {inter} (gate, up, down):", flush=True)

    def before() -> list[tuple[GPTQResult, float]]:
        out = []
        for w, hh in ((gate, h), (up, h), (down, hd)):
            r = gptq_quantize(w, hh, act_order=True)
            out.append((r, output_error(w, r.dequantize(), hh)))
        return out

    def after(factor: HessianFactor) -> list[tuple[GPTQResult, float]]:
        out = []
        hessians: tuple[HessianFactor | torch.Tensor, ...] = (factor, factor, hd)
        for w, hh in zip((gate, up, down), hessians, strict=True):
            r = gptq_quantize(w, hh, act_order=True)
            out.append((r, r.output_error))
        return out

    old, wb, cb = timed(before, dev)
    factor, wf, cf = timed(lambda: factor_hessian(h, damp=0.01, act_order=True), dev)
    new, wa, ca = timed(lambda: after(factor), dev)
    print(f"  before {wb:7.2f} s wall {cb:7.2f} s CPU per expert")
    print(
        f"  now    {wa:7.2f} s wall {ca:7.2f} s CPU per expert ({wb / wa:.2f}x wall, "
        f"{cb / ca:.2f}x CPU), + the shared factor {wf:.2f} s wall {cf:.2f} s CPU once "
        f"per layer"
    )
    for proj, (a, ea), (b, eb) in zip(("gate", "up", "down"), old, new, strict=True):
        same = torch.equal(a.codes, b.codes) and torch.equal(a.scales, b.scales)
        print(
            f"  {proj}: codes and scales {'identical' if same else 'DIFFER'}; output error "
            f"{ea:.6f} vs {eb:.6f} (rel diff {abs(ea - eb) / ea:.1e})",
            flush=True,
        )


if __name__ == "__main__":
    main()
