"""NVFP4 codec for the hot pool: e2m1 values, e4m3 block scales, a global fp32 scale."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.codecs import nvfp4
from engine.codecs.nvfp4 import E2M1_VALUES, FP4Tensor


def gaussian(rows: int, cols: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed)) * 0.02


def test_values_on_the_grid_are_exact() -> None:
    g = torch.Generator().manual_seed(1)
    grid = torch.tensor(E2M1_VALUES + tuple(-v for v in E2M1_VALUES[1:]))
    codes = grid[torch.randint(0, grid.numel(), (8, 64), generator=g)]
    codes[:, ::16] = 6.0  # every block reaches the largest magnitude: block scale 1
    w = codes * 0.25
    q = nvfp4.quantize(w)
    assert torch.equal(q.dequantize(torch.float32), w)


def test_error_is_bounded_per_element_and_overall() -> None:
    w = gaussian(64, 256, seed=2)
    q = nvfp4.quantize(w)
    d = q.dequantize(torch.float32)
    rel = float((d - w).norm() / w.norm())
    assert rel < 0.12
    # Each weight is within half the widest e2m1 step (2 -> 1 at the top) of its block scale,
    # allowing for the e4m3 rounding of the scale (up to 1/16 relative).
    scale = (q.scales.float() * q.global_scale).repeat_interleave(16, dim=1)
    assert bool(((d - w).abs() <= scale * (1.0 + 6 / 16) + 1e-9).all())


def test_layout_dtypes_and_nibble_order() -> None:
    w = torch.zeros(1, 16)
    w[0, 0], w[0, 1] = 6.0, -0.5
    q = nvfp4.quantize(w)
    assert q.packed.dtype == torch.uint8 and q.packed.shape == (1, 8)
    assert q.scales.dtype == torch.float8_e4m3fn and q.scales.shape == (1, 1)
    assert q.global_scale.dtype == torch.float32
    # 6.0 is code 7 in the low nibble; -0.5 is sign 8 | code 1 in the high nibble.
    assert int(q.packed[0, 0]) == 7 | (8 | 1) << 4
    assert q.nbytes == 8 + 1 + 4


def test_zero_and_round_half_to_even() -> None:
    q = nvfp4.quantize(torch.zeros(2, 32))
    assert torch.count_nonzero(q.dequantize()) == 0
    ties = torch.tensor([[6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0] + [0.0] * 8])
    got = nvfp4.quantize(ties).dequantize(torch.float32)[0, :8].tolist()
    assert got == [6.0, 0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0]


def test_state_dict_round_trip_through_safetensors(tmp_path: Path) -> None:
    q = nvfp4.quantize(gaussian(32, 64, seed=3))
    name = "model.language_model.layers.5.mlp.experts.1.down_proj.weight"
    sd = q.to_state_dict(name)
    assert set(sd) == {name + s for s in ("_fp4", "_fp4_scale", "_fp4_global_scale", "_fp4_shape")}
    path = tmp_path / "p.safetensors"
    save_file(sd, str(path))
    back = FP4Tensor.from_state_dict(load_file(str(path)), name)
    assert torch.equal(back.dequantize(), q.dequantize())


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="in % 16"):
        nvfp4.quantize(torch.zeros(4, 20))
    with pytest.raises(ValueError, match="non-finite"):
        nvfp4.quantize(torch.full((1, 16), float("inf")))
    q = nvfp4.quantize(gaussian(4, 32))
    sd = q.to_state_dict("w")
    del sd["w_fp4_global_scale"]
    with pytest.raises(KeyError, match="w_fp4_global_scale"):
        FP4Tensor.from_state_dict(sd, "w")
