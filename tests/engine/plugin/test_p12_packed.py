"""BF16 linears and embeddings served from their P12 codes (plugin feature ``p12_packed``).

The methods are driven directly on small layers, loading weights the way vLLM's loaders do
(a decoded tensor carrying its packed form, shard by shard), and compared with the plain BF16
computation; the forward runs under :func:`tests.support.no_host_sync.no_host_sync`. The
served engine is ``tests/e2e/test_p12_pool_serving.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import torch
import torch.nn.functional as F

from engine.codecs import p12
from engine.codecs.p12_stream import P12_ATTR, decode_stream
from tests.support.no_host_sync import no_host_sync

if TYPE_CHECKING:
    from engine.plugin._p12_linear import P12EmbeddingMethod, P12LinearMethod


def _weight(rows: int, cols: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(rows, cols, generator=g) * 0.05).to(torch.bfloat16)
    w[1, :7] = torch.tensor([1e30, -1e-30, 3e-38, 0.0, -0.0, 7e20, 1e-25])  # escapes
    return w


def _streamed(name: str, w: torch.Tensor) -> torch.Tensor:
    """``w`` as the P12 stream hands it to a loader: decoded, packed form attached."""
    ((got_name, tensor),) = list(decode_stream(p12.pack(w).to_state_dict(name).items()))
    assert got_name == name and hasattr(tensor, P12_ATTR)
    return tensor


def _linear_layer(cols: int, shards: list[int]) -> tuple[P12LinearMethod, Any]:
    """The method and its layer; the layer is ``Any``: vLLM's loaders give it attributes."""
    from engine.plugin._p12_linear import P12LinearMethod

    method = P12LinearMethod()
    layer = torch.nn.Module()
    method.create_weights(layer, cols, shards, cols, sum(shards), torch.bfloat16)
    return method, layer


@pytest.mark.parametrize("tokens", [1, 8, 40])  # decode GEMV, its upper edge, prefill GEMM
def test_a_merged_linear_matches_its_bf16_weights(tokens: int) -> None:
    shards = [48, 16, 16]  # q, k, v of different widths, each its own P12 tensor
    method, layer = _linear_layer(64, shards)
    weights = [_weight(r, 64, seed=i) for i, r in enumerate(shards)]
    for shard_id, w in zip("qkv", weights, strict=True):
        layer.weight.weight_loader(layer.weight, _streamed("x.weight", w), shard_id)
    method.process_weights_after_loading(layer)
    x = torch.randn(tokens, 64, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16)
    bias = torch.randn(80).to(torch.bfloat16)
    with no_host_sync():
        got = method.apply(layer, x, bias)
    want = F.linear(x.float(), torch.cat(weights).float(), bias.float())
    assert got.shape == (tokens, 80) and got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want, rtol=2e-2, atol=2e-2)
    assert layer.weight.numel() == 0  # nothing held at 16 bits


def test_large_weights_are_split_into_row_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.plugin import _p12_linear

    monkeypatch.setattr(_p12_linear, "BLOCK_VALUES", 10 * 64)  # blocks of 10 rows
    method, layer = _linear_layer(64, [45])
    w = _weight(45, 64, seed=3)
    layer.weight.weight_loader(layer.weight, _streamed("x.weight", w))
    assert [rows for _, rows in layer.p12_blocks[0]] == [10, 10, 10, 10, 5]
    for tokens in (2, 30):
        x = torch.randn(tokens, 64).to(torch.bfloat16)
        with no_host_sync():
            got = method.apply(layer, x)
        torch.testing.assert_close(
            got.float(), F.linear(x.float(), w.float()), rtol=2e-2, atol=2e-2
        )


def test_a_weight_without_its_packed_form_is_packed_at_load() -> None:
    method, layer = _linear_layer(32, [24])
    w = _weight(24, 32, seed=5)
    layer.weight.weight_loader(layer.weight, w.clone())  # a plain BF16 tensor
    ((prefix, rows),) = layer.p12_blocks[0]
    got = p12.unpack(
        p12.PackedBF16(
            getattr(layer, f"{prefix}_payload"),
            getattr(layer, f"{prefix}_exponents"),
            getattr(layer, f"{prefix}_escape_index"),
            getattr(layer, f"{prefix}_escape_values").view(torch.uint16),
            (rows, 32),
        )
    )
    assert torch.equal(got.view(torch.int16), w.view(torch.int16))


def test_wrong_shapes_and_missing_shards_are_named() -> None:
    method, layer = _linear_layer(32, [24, 8])
    layer.prefix = "model.layers.0.mlp.gate_up_proj"
    with pytest.raises(ValueError, match=r"gate_up_proj: weight shard 1 is \(24, 32\)"):
        layer.weight.weight_loader(layer.weight, _weight(24, 32, 0), 1)
    layer.weight.weight_loader(layer.weight, _weight(24, 32, 0), 0)
    with pytest.raises(
        ValueError,
        match=r"gate_up_proj: the checkpoint has no weight for "
        r"shard\(s\) \[1\]",
    ):
        method.process_weights_after_loading(layer)


def _embedding_layer(rows: int, dim: int) -> tuple[P12EmbeddingMethod, Any]:
    from engine.plugin._p12_linear import P12EmbeddingMethod

    method = P12EmbeddingMethod()
    layer: Any = torch.nn.Module()
    layer.org_vocab_size = rows
    padded = (rows + 63) // 64 * 64  # vLLM pads the table; the checkpoint does not
    method.create_weights(layer, dim, [padded], dim, padded, torch.bfloat16)
    return method, layer


def test_embedding_lookups_gather_decode_exactly_and_a_tied_head_reuses_the_codes() -> None:
    rows, dim = 100, 64
    method, layer = _embedding_layer(rows, dim)
    g = torch.Generator().manual_seed(4)
    w = _weight(rows, dim, seed=4)
    # A row of tiny and huge magnitudes: more escapes than the fix-up width, kept whole.
    w[7] = (
        torch.randn(dim, generator=g) * torch.exp2(torch.randint(-60, 60, (dim,), generator=g))
    ).bfloat16()
    layer.weight.weight_loader(layer.weight, _streamed("embed.weight", w))
    method.process_weights_after_loading(layer)
    assert layer.p12_row_escapes.dense_rows.shape[0] == 1  # row 7
    ids = torch.tensor([[7, 1, 0, 99], [1, 1, 7, 42]])
    with no_host_sync():
        got = method.embedding(layer, ids)
    assert torch.equal(got.view(torch.int16), w[ids].view(torch.int16))
    head: Any = torch.nn.Module()
    method.tie_weights(head, layer)
    x = torch.randn(3, dim).to(torch.bfloat16)
    with no_host_sync():
        logits = method.apply(head, x)
    torch.testing.assert_close(logits.float(), x.float() @ w.float().T, rtol=2e-2, atol=2e-2)
