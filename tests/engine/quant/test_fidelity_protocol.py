"""The fidelity bench's held-out protocol (bench/corpora/fidelity_protocol.py): readings and
intervals."""

from __future__ import annotations

from typing import Any

import torch

from bench.corpora.fidelity_protocol import SEQ, protocol, spread


class _Words:
    """A stand-in tokenizer: one id per whitespace-separated word (hash mod 50000)."""

    def __call__(self, text: str, add_special_tokens: bool = False) -> Any:
        class _Out:
            input_ids = [hash(w) % 50000 for w in text.split()]

        return _Out()


def test_both_readings_give_the_protocol_s_shapes_and_differ() -> None:
    heads = protocol(_Words(), "heads")
    stream = protocol(_Words(), "stream")
    for calib, code, prose in (heads, stream):
        assert tuple(calib.shape) == (64, SEQ)
        assert tuple(code.shape) == (32, SEQ) and tuple(prose.shape) == (32, SEQ)
    assert torch.equal(heads[2], stream[2])  # the prose is the same docstrings either way
    assert torch.equal(heads[0][0], stream[0][0])  # both start at the first even file
    assert not torch.equal(heads[0][1], stream[0][1])  # then one per file vs consecutive
    # Held-out and calibration chunks never coincide (odd vs even files).
    calib_rows = {tuple(r.tolist()) for r in heads[0]}
    assert not any(tuple(r.tolist()) in calib_rows for r in heads[1])


def test_spread_brackets_the_mean_and_pairs_the_draws() -> None:
    gen = torch.Generator().manual_seed(1)
    kld = torch.rand(32, generator=gen) * 0.1 + 0.05
    mean, ratio = spread(kld, kld)
    assert mean[0] < float(kld.mean()) < mean[1]
    assert ratio == [1.0, 1.0]  # the same draw divides itself
    mean2, ratio2 = spread(kld * 2, kld)
    assert all(abs(r - 2.0) < 1e-6 for r in ratio2)
    assert all(abs(a - 2 * b) < 1e-6 for a, b in zip(mean2, mean, strict=True))
