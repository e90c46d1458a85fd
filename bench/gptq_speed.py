"""GPTQ speed: our blocked W2 GPTQ vs the plain textbook loop, same matrix, one run.

Both quantize one ``[out, in]`` matrix (default 2048 x 4096, a GLM-5.3-Flash
expert's gate/up shape) against the same Hessian with the same algorithm and
scale rule; the reference (``engine.quant.gptq.gptq_reference``) updates every
remaining column of the whole matrix after each column, ours updates lazily
(within the 32-column group, then per group, then per 128-column block, as
GEMMs). Prints both times, the speed ratio and how many codes agree.

    .venv/bin/python bench/gptq_speed.py [--out 2048] [--in 4096] [--device cpu]

The reference is slow by design: on 2 busy CPU cores the default matrix takes
6-10 minutes for it (ours: ~15 s); ``--in 1024`` gives a quick check.
"""

from __future__ import annotations

import argparse
import time

import torch

from engine.codecs import w2
from engine.quant.gptq import gptq_quantize, gptq_reference, output_error


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=int, default=2048)
    parser.add_argument("--in", dest="in_f", type=int, default=4096)
    parser.add_argument("--tokens", type=int, default=2048, help="calibration rows for H")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    gen = torch.Generator().manual_seed(0)
    w = (torch.randn(args.out, args.in_f, generator=gen) * 0.02).to(dev)
    # Correlated inputs with uneven importance, built cheaply from a low-rank mix.
    z = torch.randn(args.tokens, 256, generator=gen)
    mix = torch.randn(256, args.in_f, generator=gen) / 16
    x = (z @ mix + 0.3 * torch.randn(args.tokens, args.in_f, generator=gen)).to(dev)
    h = 2 * x.t() @ x / args.tokens

    def timed(fn):  # type: ignore[no-untyped-def]
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        result = fn()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        return result, time.perf_counter() - t0

    ours, t_ours = timed(lambda: gptq_quantize(w, h))
    ref, t_ref = timed(lambda: gptq_reference(w, h))
    rtn = w2.quantize_rtn(w.cpu()).dequantize(torch.float32)
    agree = float((ours.codes == ref.codes).float().mean())
    print(f"matrix {args.out}x{args.in_f} on {dev}, {torch.get_num_threads()} threads")
    print(f"  reference (textbook loop): {t_ref:8.2f} s")
    print(f"  ours (blocked, lazy):      {t_ours:8.2f} s")
    print(f"  speed-up: {t_ref / t_ours:.2f}x; codes identical: {100 * agree:.3f}%")
    print(f"  output error: ours {output_error(w, ours.dequantize(), h):.4f}, reference "
          f"{output_error(w, ref.dequantize(), h):.4f}, RTN "
          f"{output_error(w.cpu(), rtn, h.cpu()):.4f}")


if __name__ == "__main__":
    main()
