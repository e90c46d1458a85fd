"""The P12 gather-decode kernel (embedding lookups) against its PyTorch reference.

Like ``test_kernels.py``: on a CPU the kernel runs in Triton's interpreter in a child pytest
process with ``TRITON_INTERPRET=1`` (it must not leak into the rest of the session).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from engine.codecs import p12
from kernels import _triton
from kernels import p12_embed as p12e
from tests.support import ROOT

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
RUNS_HERE = _triton.HAVE_TRITON and _triton.launchable(p12e._p12_gather_kernel, DEVICE)
needs_triton = pytest.mark.skipif(not RUNS_HERE, reason="Triton cannot run kernels here")


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
    assert "3 passed, 1 skipped" in proc.stdout, proc.stdout[-1000:]  # only this test skips


def _table(rows: int, dim: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(rows, dim, generator=g) * 0.02).to(torch.bfloat16)
    w[2, :5] = torch.tensor([1e30, -1e-30, 0.0, float("inf"), float("nan")])
    spread = torch.exp2(torch.randint(-70, 70, (dim,), generator=g).float())
    w[5] = (torch.randn(dim, generator=g) * spread).to(torch.bfloat16)  # mostly escapes
    return w


@needs_triton
@pytest.mark.parametrize(("rows", "dim", "block"), [(40, 64, 32), (33, 258, 128)])
def test_gather_rows_matches_reference_bit_exactly(rows: int, dim: int, block: int) -> None:
    w = _table(rows, dim, seed=rows)
    p = p12.pack(w)
    payload, exps = p.payload.to(DEVICE), p.exponents.to(DEVICE)
    ids = torch.tensor([5, 0, rows - 1, 2, 5, 17], device=DEVICE)
    got = p12e.p12_gather_rows(ids, payload, exps, rows, dim, block=block)
    ref = p12e.p12_gather_rows_reference(ids, payload, exps, rows, dim)
    assert torch.equal(got.cpu(), ref.cpu())
    esc = p12e.RowEscapes.build(payload, exps, p.escape_index, p.escape_values, rows, dim, cap=8)
    assert esc.dense_rows.shape[0] >= 1 and esc.width >= 1  # both fix-up paths run
    out = p12e.p12_embedding(ids.reshape(2, 3), payload, exps, esc, rows, dim)
    assert torch.equal(
        out.cpu().view(torch.int16), w[ids.cpu()].reshape(2, 3, dim).view(torch.int16)
    )


@needs_triton
def test_an_empty_lookup_and_odd_rows_are_handled() -> None:
    w = _table(8, 32, seed=1)
    p = p12.pack(w)
    empty = torch.zeros(0, dtype=torch.int64, device=DEVICE)
    assert p12e.p12_gather_rows(
        empty, p.payload.to(DEVICE), p.exponents.to(DEVICE), 8, 32
    ).shape == (0, 32)
    odd = p12.pack(torch.zeros(4, 7, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="even row length"):
        p12e.p12_gather_rows(empty, odd.payload, odd.exponents, 4, 7)
