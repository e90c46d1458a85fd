"""W2 scale dtype: reconstruction error against bytes, measured side by side.

For each candidate storage of the per-32 group scales, the fp32 least-squares scales from
``rtn_scales`` are rounded to that dtype and the codes are re-assigned against the rounded
scales (as the quantizer does). Prints the relative Frobenius error of the weights, its excess
over fp32 scales, the bits per weight and what the routed experts of GLM-5.3-Flash would take.

    .venv/bin/python -m bench.studies.w2_scale_dtype [--rows 1024] [--cols 2048]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch

from engine.codecs import w2

ROUTED_PARAMS = 288 * 42 * 3 * 4096 * 2048  # routed experts of the main stack
GiB = 1 << 30

Rounder = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def fp32(s: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return s


def fp16(s: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return s.to(torch.float16).to(torch.float32)


def bf16(s: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return s.to(torch.bfloat16).to(torch.float32)


def e4m3_row(s: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """float8 e4m3 relative to a per-row fp32 super-scale (row max maps to 448)."""
    row = s.amax(dim=1, keepdim=True).clamp_min(1e-30) / 448.0
    return (s / row).to(torch.float8_e4m3fn).to(torch.float32) * row


def e4m3_tensor(s: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """float8 e4m3 relative to one fp32 scale per tensor (NVFP4's global-scale scheme)."""
    g = s.amax().clamp_min(1e-30) / 448.0
    return (s / g).to(torch.float8_e4m3fn).to(torch.float32) * g


def e8m0_nearest(s: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Power of two (UE8M0, as MX formats use), nearest in the log domain."""
    return torch.where(s > 0, torch.exp2(torch.round(torch.log2(s.clamp_min(1e-38)))), s)


def e8m0_best(s: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Power of two, the better of the two neighbours by the group's squared error."""
    lo = torch.exp2(torch.floor(torch.log2(s.clamp_min(1e-38))))
    best = lo
    g = w.reshape(w.shape[0], -1, w2.GROUP)
    errs = []
    for cand in (lo, 2 * lo):
        q = w2.dequantize(w2.quantize_with_scales(w, cand), cand, torch.float32)
        errs.append(((q - w).reshape_as(g) ** 2).sum(-1))
    best = torch.where(errs[1] < errs[0], 2 * lo, lo)
    return torch.where(s > 0, best, s)


def ue5m3(s: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The format's choice: unsigned 8-bit float, 5-bit exponent, 3-bit mantissa."""
    return w2.round_scales(s)


CANDIDATES: list[tuple[str, Rounder, float]] = [
    # name, rounding, bits per group scale (amortised extra for per-row/per-tensor super-scales
    # is added below from the matrix shape)
    ("fp32", fp32, 32),
    ("fp16", fp16, 16),
    ("bf16", bf16, 16),
    ("e4m3 + fp32 per row", e4m3_row, 8),
    ("e4m3 + fp32 per tensor", e4m3_tensor, 8),
    ("e8m0 nearest", e8m0_nearest, 8),
    ("e8m0 best of 2", e8m0_best, 8),
    ("ue5m3 (chosen)", ue5m3, 8),
]


def matrices(rows: int, cols: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    gauss = torch.randn(rows, cols, generator=g) * 0.02
    # Heavier tails, as trained weights have: Student-t with 4 degrees of freedom.
    t4 = torch.distributions.StudentT(4.0).sample((rows, cols)) * 0.01
    # Rows of very different magnitude: per-row super-scales matter here.
    rowscale = torch.exp(torch.randn(rows, 1, generator=g) * 1.5)
    return {"gaussian": gauss, "student-t(4)": t4, "gaussian, log-normal rows": gauss * rowscale}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1024)
    ap.add_argument("--cols", type=int, default=2048)
    args = ap.parse_args()
    torch.manual_seed(0)
    for label, w in matrices(args.rows, args.cols).items():
        s = w2.rtn_scales(w)
        naive = w.abs().reshape(w.shape[0], -1, w2.GROUP).amax(-1) / 4
        nq = w2.dequantize(w2.quantize_with_scales(w, naive), naive, torch.float32)
        naive_err = float((nq - w).norm() / w.norm())
        print(f"\n{label} [{args.rows}x{args.cols}]  (max-abs/4 scales, fp32: {naive_err:.4f})")
        print(f"{'scale dtype':26s} {'rel err':>8s} {'excess':>8s} {'bpw':>7s} {'routed GiB':>10s}")
        base = None
        for name, rounder, bits in CANDIDATES:
            rs = rounder(s, w)
            q = w2.dequantize(w2.quantize_with_scales(w, rs), rs, torch.float32)
            err = float((q - w).norm() / w.norm())
            base = err if base is None else base
            extra = 32 / args.cols if "per row" in name else 0.0
            bpw = 2 + bits / w2.GROUP + extra
            size = ROUTED_PARAMS * bpw / 8 / GiB
            print(f"{name:26s} {err:8.4f} {100 * (err / base - 1):7.2f}% {bpw:7.3f} {size:10.1f}")


if __name__ == "__main__":
    main()
