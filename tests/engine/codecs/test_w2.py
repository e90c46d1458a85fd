"""W2 codec: code packing, RTN scales, ue5m3 scale encoding, the stored tensors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.codecs import w2
from engine.codecs.w2 import W2Tensor
from kernels.w2_layout import SCALE_MAX, SCALE_MIN


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


def gaussian(rows: int, cols: int, seed: int = 0, std: float = 0.02) -> torch.Tensor:
    return torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed)) * std


def test_pack_bit_order_lowest_column_in_lowest_bits() -> None:
    codes = torch.zeros(1, 32, dtype=torch.uint8)
    codes[0, :4] = torch.tensor([1, 2, 3, 0])
    packed = w2.pack_codes(codes)
    assert packed.shape == (1, 8)
    assert int(packed[0, 0]) == 1 | 2 << 2 | 3 << 4 | 0 << 6


def test_pack_unpack_round_trip() -> None:
    g = torch.Generator().manual_seed(1)
    codes = torch.randint(0, 4, (37, 128), generator=g, dtype=torch.uint8)
    assert torch.equal(w2.unpack_codes(w2.pack_codes(codes), 128), codes)


def test_codes_map_to_the_codebook_in_order() -> None:
    x = torch.tensor([[-9.0, -2.6, -2.4, -0.1, 0.1, 2.4, 2.6, 9.0] * 4])
    assert w2.nearest_code(x)[0, :8].tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert w2.code_values(torch.arange(4, dtype=torch.uint8)).tolist() == [-4.0, -1.0, 1.0, 4.0]


def test_exact_zeros_are_sign_balanced() -> None:
    codes = w2.nearest_code(torch.zeros(2, 64))
    vals = w2.code_values(codes)
    assert float(vals.sum()) == 0.0 and set(torch.unique(vals).tolist()) == {-1.0, 1.0}


def test_all_zero_group_dequantizes_to_zero() -> None:
    w = gaussian(4, 64)
    w[1, 32:] = 0
    q = w2.quantize_rtn(w)
    assert int(q.scales_enc[1, 1]) == 0
    assert torch.count_nonzero(q.dequantize(torch.float32)[1, 32:]) == 0


def test_rtn_error_is_bounded_and_beats_max_abs_scales() -> None:
    w = gaussian(128, 512, seed=2)
    err = rel_err(w2.quantize_rtn(w).dequantize(torch.float32), w)
    naive = w.abs().reshape(128, -1, 32).amax(-1) / 4
    naive_err = rel_err(w2.dequantize(w2.quantize_with_scales(w, naive), naive), w)
    # A 4-level quantizer of a Gaussian has an optimal relative error of about 0.33.
    assert 0.25 < err < 0.345
    assert err < 0.85 * naive_err


def test_rtn_scales_are_close_to_a_brute_force_optimum() -> None:
    w = gaussian(8, 64, seed=3)
    s = w2.rtn_scales(w)
    groups = w.reshape(16, 32)
    for grp, scale in zip(groups, s.reshape(16), strict=True):
        cands = torch.linspace(1e-4, float(grp.abs().max()), 4000).unsqueeze(1)  # [4000, 1]
        q = w2.code_values(w2.nearest_code(grp / cands)) * cands
        best = float(((grp - q) ** 2).sum(dim=1).min())
        got = float(((grp - w2.code_values(w2.nearest_code(grp / scale)) * scale) ** 2).sum())
        assert got <= best * 1.0001


def test_scale_encoding_relative_error_and_exact_values() -> None:
    g = torch.Generator().manual_seed(4)
    s = torch.exp(torch.empty(10_000).uniform_(-13, 7, generator=g))  # 2e-6 .. 1100
    back = w2.decode_scales(w2.encode_scales(s))
    rel = ((back - s).abs() / s).max()
    assert float(rel) <= 1 / 16 + 1e-7  # 3 mantissa bits, round to nearest
    exact = torch.tensor([0.0, 1.0, 1.125, 0.75, 2.0**-20 * 1.125, SCALE_MAX])
    assert torch.equal(w2.decode_scales(w2.encode_scales(exact)), exact)
    assert w2.encode_scales(torch.tensor([SCALE_MAX * 10]))[0] == 255  # saturates
    assert float(w2.round_scales(torch.tensor([SCALE_MIN / 4]))[0]) == 0.0  # underflow to 0
    with pytest.raises(ValueError, match="finite and non-negative"):
        w2.encode_scales(torch.tensor([-1.0]))
    with pytest.raises(ValueError, match="finite and non-negative"):
        w2.encode_scales(torch.tensor([float("nan")]))


def test_encoded_scales_cost_little_error() -> None:
    w = gaussian(64, 512, seed=5)
    s = w2.rtn_scales(w)
    full = rel_err(w2.dequantize(w2.quantize_with_scales(w, s), s), w)
    rounded = w2.round_scales(s)
    enc = rel_err(w2.dequantize(w2.quantize_with_scales(w, rounded), rounded), w)
    assert enc < full * 1.01


def test_dequantize_matches_codes_times_scales() -> None:
    w = gaussian(16, 64, seed=6)
    q = w2.quantize_rtn(w)
    manual = w2.code_values(q.codes()).reshape(16, 2, 32) * q.scales().unsqueeze(-1)
    assert torch.equal(q.dequantize(torch.float32), manual.reshape(16, 64))
    assert q.dequantize().dtype == torch.bfloat16
    assert q.nbytes == 16 * 64 // 4 + 16 * 2


def test_state_dict_round_trip_through_safetensors(tmp_path: Path) -> None:
    q = w2.quantize_rtn(gaussian(24, 96, seed=7))
    name = "model.language_model.layers.3.mlp.experts.7.gate_proj.weight"
    sd = q.to_state_dict(name)
    assert set(sd) == {name + "_packed", name + "_scale", name + "_shape"}
    assert sd[name + "_packed"].dtype == torch.uint8 and sd[name + "_scale"].dtype == torch.uint8
    path = tmp_path / "w.safetensors"
    save_file(sd, str(path))
    back = W2Tensor.from_state_dict(load_file(str(path)), name)
    assert back.shape == (24, 96)
    assert torch.equal(back.dequantize(), q.dequantize())


def test_bad_shapes_and_missing_tensors() -> None:
    with pytest.raises(ValueError, match="not a multiple of the group size 32"):
        w2.rtn_scales(torch.zeros(4, 40))
    with pytest.raises(ValueError, match="2-D"):
        w2.quantize_rtn(torch.zeros(64))
    q = w2.quantize_rtn(gaussian(4, 64))
    with pytest.raises(ValueError, match="packed codes must be uint8"):
        W2Tensor(q.packed[:, :-1], q.scales_enc, (4, 64))
    with pytest.raises(ValueError, match="scales must be uint8"):
        W2Tensor(q.packed, q.scales_enc.float(), (4, 64))
    sd = q.to_state_dict("x.weight")
    del sd["x.weight_scale"]
    with pytest.raises(KeyError, match="x.weight_scale"):
        W2Tensor.from_state_dict(sd, "x.weight")
    with pytest.raises(ValueError, match="scales shape"):
        w2.quantize_with_scales(gaussian(4, 64), torch.ones(4, 3))
