"""Lossless 12-bit BF16 packing (P12): bit-exact round trips and the stored layout."""

from __future__ import annotations

import os
import shutil
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.codecs import _p12_numpy, p12
from engine.codecs.format import P12_ESCAPE_INDEX_SUFFIX, P12_PAYLOAD_SUFFIX
from engine.codecs.p12 import PackedBF16
from kernels.p12_layout import p12_unpack_reference


@pytest.fixture(autouse=True, params=["c", "numpy"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Every test runs on both backends: their output must be the same bytes."""
    if request.param == "c" and p12._p12c is None:
        pytest.skip("the compiled P12 loops were not built (no C compiler at install time)")
    monkeypatch.setattr(p12, "BACKEND", request.param)
    yield request.param


def test_compiled_loops_are_built_where_a_compiler_exists() -> None:
    # The numpy fallback is about three times slower: a silent fallback must not go unnoticed.
    if shutil.which(sysconfig.get_config_var("CC").split()[0] or "cc") is None:
        pytest.skip("no C compiler on this machine")
    assert p12._p12c is not None


def test_backends_write_identical_bytes(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if backend != "c":
        pytest.skip("compares the C backend against numpy")
    g = torch.Generator().manual_seed(11)
    t = (torch.randn(3, 100_001, generator=g) * 0.02).to(torch.bfloat16)
    t[0, ::5] = 0  # lookup path
    t[1, :50] = from_bits(torch.arange(-32768, 32768, 1311))  # escapes, NaN, Inf
    for row in (t[0], t[1], t[2], t.reshape(-1)[1:]):
        c = p12.pack(row)
        monkeypatch.setattr(p12, "BACKEND", "numpy")
        py = p12.pack(row)
        monkeypatch.setattr(p12, "BACKEND", "c")
        assert torch.equal(c.payload, py.payload) and torch.equal(c.exponents, py.exponents)
        assert torch.equal(c.escape_index, py.escape_index)
        assert torch.equal(c.escape_values.view(torch.int16), py.escape_values.view(torch.int16))


def test_c_pack_retries_when_escapes_overflow_its_first_buffer() -> None:
    # Every exponent equally often: 15/16 of the values escape, far more than the first guess.
    t = from_bits(torch.arange(-32768, 32768).repeat(3))
    p = assert_round_trip(t)
    assert p.escape_index.numel() > t.numel() // 2


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16)


def assert_round_trip(t: torch.Tensor) -> PackedBF16:
    p = p12.pack(t)
    out = p12.unpack(p)
    assert out.dtype == torch.bfloat16 and out.shape == t.shape
    assert torch.equal(bits(out), bits(t))
    ref = p12_unpack_reference(p.payload, p.exponents, p.escape_index, p.escape_values, t.numel())
    assert torch.equal(ref.view(torch.int16), bits(t).reshape(-1))
    return p


def from_bits(b: torch.Tensor) -> torch.Tensor:
    return b.to(torch.int16).view(torch.bfloat16)


@pytest.mark.parametrize("shape", [(1,), (2,), (3,), (7, 5), (64, 96), (3, 1000, 11)])
def test_random_bit_patterns_round_trip(shape: tuple[int, ...]) -> None:
    g = torch.Generator().manual_seed(sum(shape))
    t = from_bits(torch.randint(-32768, 32768, shape, generator=g))
    p = assert_round_trip(t)
    assert p.payload.numel() == 3 * ((t.numel() + 1) // 2)


@pytest.mark.parametrize("shape", [(), (0,), (3, 0)])
def test_scalar_and_empty_tensors(shape: tuple[int, ...]) -> None:
    t = torch.full(shape, -2.5, dtype=torch.bfloat16)
    p = assert_round_trip(t)
    assert p.shape == shape


@pytest.mark.parametrize("scale", [1.0, 0.02, 1e-30, 3e38])
def test_gaussian_tensors_round_trip_across_chunks(scale: float) -> None:
    g = torch.Generator().manual_seed(1)
    n = 2 * _p12_numpy.CHUNK_PAIRS + 3  # several chunks and an odd tail
    t = (torch.randn(n, generator=g) * scale).to(torch.bfloat16)
    p = assert_round_trip(t)
    # Bell-shaped values: the 16 most frequent exponents cover nearly everything.
    assert p.escape_index.numel() < n * 1e-3 + 10


def test_every_bf16_bit_pattern_round_trips() -> None:
    """All 65536 patterns: every exponent, NaN payloads, +-Inf, subnormals, -0.0."""
    allbits = torch.arange(-32768, 32768, dtype=torch.int32)
    perm = torch.randperm(allbits.numel(), generator=torch.Generator().manual_seed(0))
    t = from_bits(allbits[perm]).reshape(256, 256)
    p = assert_round_trip(t)
    assert p.escape_index.numel() == 65536 - 16 * 256  # 16 exponents x 2 signs x 128 mantissas


def test_special_values_keep_their_bits() -> None:
    specials = [
        0x7FC0,  # quiet NaN
        0x7F81,  # signalling NaN with payload
        0xFFFF,  # negative NaN, all payload bits
        0x7F80,  # +Inf
        0xFF80,  # -Inf
        0x8000,  # -0.0
        0x0000,  # +0.0
        0x0001,  # smallest subnormal
        0x807F,  # largest negative subnormal
        0x7F7F,  # largest finite
    ]
    body = torch.full((997,), 0x3F80)  # 1.0 everywhere else
    body[::100][: len(specials)] = torch.tensor(specials)
    t = from_bits(body)
    assert_round_trip(t)


def test_escapes_are_listed_once_with_index_zero_in_payload() -> None:
    vals = torch.tensor([1.0] * 20 + [2.0**-100, -(2.0**90)], dtype=torch.float32)
    # With 1.0: exactly 16 exponents that occur more often than the two rare ones.
    values = [2.0**k for k in range(15)] * 2
    t = torch.cat((vals, torch.tensor(values) * 3)).to(torch.bfloat16)
    p = assert_round_trip(t)
    assert p.escape_index.tolist() == [20, 21]
    assert torch.equal(p.escape_values.view(torch.int16), bits(t)[20:22])
    pairs = (t.numel() + 1) // 2
    nibbles = p.payload[2 * pairs + 10]  # values 20 and 21 share the index byte of pair 10
    assert int(nibbles) == 0


def test_exponent_table_holds_the_most_frequent_exponents_ascending() -> None:
    g = torch.Generator().manual_seed(3)
    t = (torch.randn(5000, generator=g) * 0.05).to(torch.bfloat16)
    exps = (bits(t).to(torch.int32) >> 7) & 0xFF
    counts = torch.bincount(exps, minlength=256)
    table = p12.exponent_table(t)
    assert table.tolist() == sorted(table.tolist())
    chosen = counts[table.long()]
    others = counts.clone()
    others[table.long()] = -1
    assert int(chosen.min()) >= int(others.max())


def test_non_contiguous_table_uses_the_lookup_path() -> None:
    # Zeros make exponent 0 frequent, so the table is not a contiguous range.
    g = torch.Generator().manual_seed(4)
    t = (torch.randn(40_001, generator=g) * 0.02).to(torch.bfloat16)
    t[::3] = 0
    p = assert_round_trip(t)
    assert 0 in p.exponents.tolist()


def test_misaligned_and_strided_inputs() -> None:
    g = torch.Generator().manual_seed(5)
    base = torch.randn(10_001, generator=g).to(torch.bfloat16)
    assert_round_trip(base[1:])  # storage offset of one element: misaligned for uint32
    assert_round_trip(base[:10_000].reshape(100, 100).T)  # non-contiguous


@pytest.mark.parametrize("rows", [32, 33])  # even count: decoded in place; odd: copied in
def test_unpack_into_out_tensor(rows: int) -> None:
    t = torch.randn(rows, 17).to(torch.bfloat16)
    t[0, 0] = float("inf")  # an escape, written into out as well
    out = torch.empty(rows, 17, dtype=torch.bfloat16)
    res = p12.unpack(p12.pack(t), out=out)
    assert res is out and torch.equal(bits(out), bits(t))
    with pytest.raises(ValueError, match=f"bfloat16 tensor of {rows * 17} values"):
        p12.unpack(p12.pack(t), out=torch.empty(5, dtype=torch.bfloat16))


def test_state_dict_round_trip_through_safetensors(tmp_path: Path) -> None:
    t = torch.randn(300, 7).to(torch.bfloat16)
    t[0, 0] = float("nan")
    p = p12.pack(t)
    name = "model.layers.0.self_attn.q_proj.weight"
    sd = p.to_state_dict(name)
    assert set(sd) == {
        name + "_p12",
        name + "_p12_exponents",
        name + "_p12_escape_index",
        name + "_p12_escape_value",
        name + "_p12_shape",
    }
    path = tmp_path / "x.safetensors"
    save_file(sd, str(path))
    back = PackedBF16.from_state_dict(load_file(str(path)), name)
    assert torch.equal(bits(p12.unpack(back)), bits(t))


def test_bad_inputs_are_rejected_with_names() -> None:
    with pytest.raises(TypeError, match="bfloat16"):
        p12.pack(torch.zeros(4))
    p = p12.pack(torch.ones(10, dtype=torch.bfloat16))
    sd = p.to_state_dict("w")
    del sd["w" + P12_ESCAPE_INDEX_SUFFIX]
    with pytest.raises(KeyError, match="w_p12_escape_index"):
        PackedBF16.from_state_dict(sd, "w")
    sd = p.to_state_dict("w")
    sd["w" + P12_PAYLOAD_SUFFIX] = sd["w" + P12_PAYLOAD_SUFFIX][:-1]  # truncated payload
    with pytest.raises(ValueError, match="payload must be 15"):
        PackedBF16.from_state_dict(sd, "w")
    with pytest.raises(ValueError, match="outside"):
        PackedBF16(
            p.payload, p.exponents, torch.tensor([10]), torch.zeros(1, dtype=torch.uint16), (10,)
        )
    with pytest.raises(ValueError, match="16 distinct"):
        p12.pack(torch.ones(4, dtype=torch.bfloat16), exponents=torch.zeros(16, dtype=torch.uint8))


def _real_weights(home: str | None) -> dict[str, torch.Tensor]:
    """Weights of SmolLM2 if it was converted on this machine, else of a locally built model."""
    if home:
        path = Path(home) / "data/models/smollm2-135m-instruct/model.safetensors"
        if path.is_file():
            sd = load_file(str(path))
            return {k: v.to(torch.bfloat16) for k, v in list(sd.items())[:24]}
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    return {k: v.detach() for k, v in model.state_dict().items()}


# Read before the suite's autouse fixture points SPARKCODE_HOME at a temporary directory.
_HOME_AT_IMPORT = os.environ.get("SPARKCODE_HOME")


@pytest.fixture(scope="module")
def real_weights() -> dict[str, torch.Tensor]:
    return _real_weights(_HOME_AT_IMPORT)


@pytest.mark.slow  # builds a model with transformers when SmolLM2 is not converted locally
def test_model_weights_round_trip(real_weights: dict[str, torch.Tensor]) -> None:
    assert real_weights
    for name, t in real_weights.items():
        p = assert_round_trip(t)
        assert p.nbytes <= 0.76 * 2 * t.numel() + 64, name  # about 12 of 16 bits


def test_sampled_table_is_not_fooled_by_periodic_structure() -> None:
    g = torch.Generator().manual_seed(8)
    t = (torch.randn(1024, 1024, generator=g) * 0.02).to(torch.bfloat16)
    t[:, ::4] = 0  # zeroed columns: a strided sample would see only zeros
    p = assert_round_trip(t)
    assert p.escape_index.numel() < 0.001 * t.numel()


def test_bad_sampled_table_falls_back_to_an_exact_histogram() -> None:
    n = 16 * p12.EXACT_HISTOGRAM_MAX
    g = torch.Generator().manual_seed(9)
    t = (torch.randn(n, generator=g) * 0.02).to(torch.bfloat16)
    # Zero exactly the blocks the sampler reads, so the sampled table is {0, fillers}.
    block = p12.sample_block(n)
    for s in p12.sample_starts(n):
        t[s : s + block] = 0
    p = assert_round_trip(t)
    assert p.escape_index.numel() < 0.001 * n


def test_compiled_loops_refuse_wrong_sizes_with_names(backend: str) -> None:
    if backend != "c":
        pytest.skip("the C module's own argument checks")
    import numpy as np

    c = p12._p12c
    u = np.zeros(10, dtype=np.uint16)
    payload = np.zeros(15, dtype=np.uint8)
    escapes = np.zeros(4, dtype=np.int64)
    with pytest.raises(ValueError, match="values must be whole uint16s, got 3 bytes"):
        c.pack(np.zeros(3, dtype=np.uint8), np.zeros(256, dtype=np.uint8), payload, escapes)
    with pytest.raises(ValueError, match="index_of must be 256 bytes"):
        c.pack(u, np.zeros(255, dtype=np.uint8), payload, escapes)
    with pytest.raises(ValueError, match="payload must be 15 bytes"):
        c.pack(u, np.zeros(256, dtype=np.uint8), payload[:-1], escapes)
    table = np.arange(16, dtype=np.uint8)
    with pytest.raises(ValueError, match="escape position 10 is outside the 10 values"):
        c.unpack(payload, table, np.array([10]), np.zeros(1, dtype=np.uint16), u)
    with pytest.raises(ValueError, match="as many uint16 values"):
        c.unpack(payload, table, np.array([1]), np.zeros(2, dtype=np.uint16), u)
    with pytest.raises(ValueError, match="cannot take 4 blocks of 11"):
        c.histogram(u, np.zeros(256, dtype=np.int64), 4, 11)
    with pytest.raises(ValueError, match="not C-contiguous"):
        c.pack(np.zeros(20, dtype=np.uint16)[::2], np.zeros(256, np.uint8), payload, escapes)
