"""engine.codecs.p12_stream: a sparkcode checkpoint read back as plain tensors for a loader."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from engine.codecs import nvfp4, p12, w2
from engine.codecs.p12_stream import LoadStats, decode_stream
from tests.support.glm_fixture import TinyGLM


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16)


def packed_checkpoint() -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(the encoded tensors in file order, the originals)."""
    g = torch.Generator().manual_seed(3)
    norm = (1 + 0.1 * torch.randn(64, generator=g)).to(torch.bfloat16)
    attn = (torch.randn(32, 64, generator=g) * 0.05).to(torch.bfloat16)
    attn[0, 0] = float("nan")  # an escape: decoded bit-exactly too
    expert = torch.randn(64, 64, generator=g) * 0.05
    sd: dict[str, torch.Tensor] = {}
    sd.update(p12.pack(norm).to_state_dict("model.norm.weight"))
    sd.update(p12.pack(attn).to_state_dict("model.layers.0.self_attn.o_proj.weight"))
    name = "model.layers.0.mlp.experts.3.down_proj.weight"
    sd.update(w2.quantize_rtn(expert).to_state_dict(name))
    sd.update(nvfp4.quantize(expert).to_state_dict(name))
    sd["model.layers.0.mlp.gate.e_score_correction_bias"] = torch.zeros(4)
    return sd, {"model.norm.weight": norm, "model.layers.0.self_attn.o_proj.weight": attn}


def test_p12_groups_come_back_bit_exact_under_their_names() -> None:
    sd, originals = packed_checkpoint()
    stats = LoadStats()
    out = dict(decode_stream(sd.items(), stats=stats))
    for name, t in originals.items():
        assert out[name].dtype == torch.bfloat16 and torch.equal(bits(out[name]), bits(t))
    w2_names = {
        n
        for n in sd
        if n.endswith(("_packed", "_scale", "_shape")) and "_fp4" not in n and "_p12" not in n
    }
    assert len(w2_names) == 3
    assert w2_names <= set(out)  # W2 experts stay packed for the serving method
    assert not any("_fp4" in n or "_p12" in n for n in out)
    assert stats.p12_decoded == 2 and stats.fp4_dropped == 4
    assert "model.layers.0.mlp.gate.e_score_correction_bias" in out


def test_fp4_copies_pass_through_when_kept() -> None:
    sd, _ = packed_checkpoint()
    out = dict(decode_stream(sd.items(), keep_fp4=True))
    assert (
        sum(n.endswith(("_fp4", "_fp4_scale", "_fp4_global_scale", "_fp4_shape")) for n in out) == 4
    )


def test_groups_split_across_the_stream_are_joined() -> None:
    sd, originals = packed_checkpoint()
    items = sorted(sd.items(), key=lambda kv: kv[0][::-1])  # suffixes interleaved
    out = dict(decode_stream(items))
    assert torch.equal(bits(out["model.norm.weight"]), bits(originals["model.norm.weight"]))


def test_an_incomplete_group_is_named() -> None:
    sd, _ = packed_checkpoint()
    del sd["model.norm.weight_p12_exponents"]
    with pytest.raises(ValueError, match=r"model.norm.weight \(missing model.norm.weight_p12_exp"):
        list(decode_stream(sd.items()))


def test_the_converter_output_reads_back(tiny_glm: TinyGLM, rtn_out: Path) -> None:
    # Every shard sparkcode quantize wrote decodes; each BF16 tensor is the source's, exactly.
    out: dict[str, torch.Tensor] = {}
    for shard in sorted(rtn_out.glob("*.safetensors")):
        out.update(decode_stream(load_file(str(shard)).items()))
    bf16 = [n for n, t in tiny_glm.raw.items() if t.dtype == torch.bfloat16]
    assert bf16
    for name in bf16:
        assert torch.equal(bits(out[name]), bits(tiny_glm.raw[name])), name
    assert any(n.endswith("experts.0.gate_proj.weight_packed") for n in out)
