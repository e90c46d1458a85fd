"""End-to-end conversion of the tiny GLM checkpoint, read back; resume; bad inputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open

from engine.codecs import nvfp4, p12, w2
from engine.codecs.format import FORMAT_VERSION, QUANT_METHOD
from engine.errors import UserError
from engine.quant import pipeline
from engine.quant.calib import CalibrationFile
from engine.quant.checkpoint import CheckpointError
from engine.quant.converter import TensorConverter
from engine.quant.inspect import InspectError, inspect_model, render_text
from engine.quant.manifest import Manifest
from engine.quant.pipeline import ConversionError, ConvertOptions, convert, staging_dir
from tests.engine.quant.conftest import POOL_GB, rtn_options
from tests.support.glm_fixture import EXPERTS, TinyGLM, read_checkpoint


def test_rtn_conversion_reads_back(rtn_out: Path, tiny_glm: TinyGLM) -> None:
    out = read_checkpoint(rtn_out)
    config = json.loads((rtn_out / "config.json").read_text())
    qc = config["quantization_config"]
    assert qc["quant_method"] == QUANT_METHOD and qc["format_version"] == FORMAT_VERSION
    assert qc["source_quantization"]["quant_method"] == "fp8"
    assert config["text_config"]["n_routed_experts"] == EXPERTS
    assert (rtn_out / "tokenizer_config.json").is_file()
    assert not staging_dir(rtn_out).exists()
    for name, original in tiny_glm.originals.items():
        raw = tiny_glm.raw[name]
        if ".mlp.experts." in name:
            q = w2.W2Tensor.from_state_dict(out, name).dequantize(torch.float32)
            rel = float((q - original).norm() / original.norm())
            assert 0.0 < rel < 0.45, (name, rel)
            assert name not in out and name + "_scale_inv" not in out
        elif raw.dtype == torch.bfloat16:
            unpacked = p12.unpack(p12.PackedBF16.from_state_dict(out, name))
            assert torch.equal(unpacked.view(torch.int16), raw.view(torch.int16)), name
        elif raw.dtype == torch.float8_e4m3fn:
            assert torch.equal(out[name].view(torch.uint8), raw.view(torch.uint8)), name
            assert torch.equal(out[name + "_scale_inv"], tiny_glm.raw[name + "_scale_inv"])
        else:
            assert torch.equal(out[name], raw), name


def test_hot_pool_is_within_budget_and_follows_calibration(
    rtn_out: Path, tiny_glm: TinyGLM, calib_file: Path
) -> None:
    out = read_checkpoint(rtn_out)
    pool = json.loads((rtn_out / "config.json").read_text())["quantization_config"]["fp4_pool"]
    chosen = [tuple(p) for p in pool["experts"]]
    assert chosen and pool["counts_from"] == "calibration"
    assert pool["bytes"] <= POOL_GB * (1 << 30)
    fp4_names = {n[: -len("_fp4")] for n in out if n.endswith("_fp4")}
    expected = {
        tiny_glm.expert_name(layer, e, p)
        for layer, e in chosen
        for p in ("gate_proj", "up_proj", "down_proj")
    }
    assert fp4_names == expected
    for name in expected:
        fp4 = nvfp4.FP4Tensor.from_state_dict(out, name).dequantize(torch.float32)
        original = tiny_glm.originals[name]
        assert float((fp4 - original).norm() / original.norm()) < 0.15
    # The pooled experts are the most routed ones (equal sizes): check the top one.
    counts = {}
    reader_calib = CalibrationFile(calib_file)
    from engine.quant.calib import expert_counts, route

    for layer in tiny_glm.moe_layers:
        x = reader_calib.inputs(layer)
        assert x is not None
        prefix = f"model.language_model.layers.{layer}.mlp.gate."
        ids = route(
            x.float(),
            tiny_glm.originals[prefix + "weight"],
            tiny_glm.originals[prefix + "e_score_correction_bias"],
            2,
        )
        for e, c in enumerate(expert_counts(ids, EXPERTS).tolist()):
            counts[(layer, e)] = c
    best = max(counts, key=lambda k: counts[k])
    assert best in chosen
    assert pool["coverage"] == pytest.approx(sum(counts[p] for p in chosen) / sum(counts.values()))


def _output_errors(dst: Path, tiny_glm: TinyGLM, calib_file: Path) -> dict[str, float]:
    """||(W - Q) X|| / ||W X|| per gate/up expert matrix, from the files and real inputs."""
    out = read_checkpoint(dst)
    calib = CalibrationFile(calib_file)
    errors = {}
    for layer in tiny_glm.moe_layers:
        x = calib.inputs(layer)
        assert x is not None
        for e in range(EXPERTS):
            for proj in ("gate_proj", "up_proj"):
                name = tiny_glm.expert_name(layer, e, proj)
                w = tiny_glm.originals[name]
                q = w2.W2Tensor.from_state_dict(out, name).dequantize(torch.float32)
                xf = x.float()
                errors[name] = float(((w - q) @ xf.t()).norm() / (w @ xf.t()).norm())
    return errors


def test_gptq_lowers_output_error_against_rtn(
    gptq_out: Path, rtn_out: Path, tiny_glm: TinyGLM, calib_file: Path
) -> None:
    gptq = _output_errors(gptq_out, tiny_glm, calib_file)
    rtn = _output_errors(rtn_out, tiny_glm, calib_file)
    mean_g, mean_r = sum(gptq.values()) / len(gptq), sum(rtn.values()) / len(rtn)
    assert mean_g < 0.9 * mean_r, (mean_g, mean_r)
    assert sum(gptq[n] < rtn[n] for n in gptq) >= 0.9 * len(gptq)
    # down_proj too, by the manifest's record of the per-expert Hessian error.
    stats = Manifest.load(gptq_out).all_stats()
    rstats = Manifest.load(rtn_out).all_stats()
    downs = [n for n in stats if ".experts." in n and n.endswith("down_proj.weight")]
    assert all(stats[n]["hessian"] == "expert" and stats[n]["method"] == "gptq" for n in downs)
    assert sum(stats[n]["out_err"] for n in downs) < 0.95 * sum(rstats[n]["out_err"] for n in downs)


def test_recorded_output_errors_are_the_real_ones(
    gptq_out: Path, tiny_glm: TinyGLM, calib_file: Path
) -> None:
    """The manifest's gate/up out_err (from GPTQ's own sums, with the layer's shared Hessian
    factored once) is the error measured from the written file on the real inputs."""
    stats = Manifest.load(gptq_out).all_stats()
    measured = _output_errors(gptq_out, tiny_glm, calib_file)
    for name, err in measured.items():
        assert stats[name]["hessian"] == "shared" and stats[name]["method"] == "gptq"
        assert stats[name]["out_err"] == pytest.approx(err, rel=1e-3), name


def test_inspect_reports_layers_and_sizes(gptq_out: Path) -> None:
    report = inspect_model(gptq_out)
    moe = {r.layer: r for r in report.layers if r.w2_tensors}
    assert sorted(r for r in moe if r is not None) == [1, 2, 3, 4] and None not in moe
    assert all(r.w2_tensors == 3 * EXPERTS and r.gptq == 3 * EXPERTS for r in moe.values())
    assert all(r.mean_out_err is not None and 0 < r.mean_out_err < 0.5 for r in moe.values())
    src, dst = report.bytes_by_kind["w2"]
    assert dst < src / 3  # FP8 (8 bits + scales) -> 2.25 bits
    assert "fp4 pool" in report.bytes_by_kind and "p12" in report.bytes_by_kind
    text = render_text(report)
    assert "out_err" in text and "coverage" in text
    json.dumps(report.to_json())


def test_interrupted_conversion_resumes(
    tiny_glm: TinyGLM,
    calib_file: Path,
    rtn_out: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dst = tmp_path / "out"
    options = rtn_options(calib_file)
    real = pipeline._convert_shard
    converted: list[str] = []

    def flaky(conv: Any, shard: Any, *args: Any) -> Any:
        if shard.name.startswith("model-00002"):
            raise RuntimeError("simulated crash")
        converted.append(shard.name)
        return real(conv, shard, *args)

    monkeypatch.setattr(pipeline, "_convert_shard", flaky)
    with pytest.raises(ConversionError, match=r"model-00002-of-00003.*--resume"):
        convert(tiny_glm.path, dst, options)
    stage = staging_dir(dst)
    assert not dst.exists()
    assert (stage / "model-00001-of-00003.safetensors").is_file()
    assert list(Manifest.load(stage).shards) == ["model-00001-of-00003.safetensors"]

    with pytest.raises(ConversionError, match="unfinished conversion"):
        convert(tiny_glm.path, dst, options)
    with pytest.raises(ConversionError, match="different options"):
        convert(tiny_glm.path, dst, ConvertOptions(method="rtn", pool_gb=1.0), resume=True)

    def counted(conv: Any, shard: Any, *args: Any) -> Any:
        converted.append(shard.name)
        return real(conv, shard, *args)

    monkeypatch.setattr(pipeline, "_convert_shard", counted)
    convert(tiny_glm.path, dst, options, resume=True)
    assert converted == [
        "model-00001-of-00003.safetensors",
        "model-00002-of-00003.safetensors",
        "model-00003-of-00003.safetensors",
    ]  # shard 1 was not redone
    assert not stage.exists()
    # Same bytes as an uninterrupted run with the same options.
    fresh, resumed = Manifest.load(rtn_out), Manifest.load(dst)
    assert {s: r.tensors for s, r in fresh.shards.items()} == {
        s: r.tensors for s, r in resumed.shards.items()
    }


def test_damaged_finished_shard_is_redone(
    tiny_glm: TinyGLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dst = tmp_path / "out"
    options = ConvertOptions(method="rtn", pool_gb=0.0)
    real = pipeline._convert_shard
    converted: list[str] = []

    def stop_at_third(conv: Any, shard: Any, *args: Any) -> Any:
        if shard.name.startswith("model-00003"):
            raise KeyboardInterrupt
        converted.append(shard.name)
        return real(conv, shard, *args)

    monkeypatch.setattr(pipeline, "_convert_shard", stop_at_third)
    with pytest.raises(KeyboardInterrupt):
        convert(tiny_glm.path, dst, options)
    first = staging_dir(dst) / "model-00001-of-00003.safetensors"
    data = bytearray(first.read_bytes())
    data[-10] ^= 0xFF  # flip bits inside the last tensor's data
    first.write_bytes(bytes(data))

    def counted(conv: Any, shard: Any, *args: Any) -> Any:
        converted.append(shard.name)
        return real(conv, shard, *args)

    monkeypatch.setattr(pipeline, "_convert_shard", counted)
    notes: list[str] = []

    class Recorder(pipeline.SilentProgress):
        def note(self, message: str) -> None:
            notes.append(message)

    convert(tiny_glm.path, dst, options, resume=True, progress=Recorder())
    assert converted[2:] == ["model-00001-of-00003.safetensors", "model-00003-of-00003.safetensors"]
    assert any("redoing shard model-00001" in n for n in notes)


def test_bad_source_stops_before_writing(src_copy: Path, tmp_path: Path) -> None:
    shard = src_copy / "model-00003-of-00003.safetensors"
    shard.write_bytes(shard.read_bytes()[:-64])
    dst = tmp_path / "out"
    with pytest.raises(CheckpointError, match="model-00003-of-00003.safetensors is truncated"):
        convert(src_copy, dst, ConvertOptions(method="rtn"))
    assert not dst.exists() and not staging_dir(dst).exists()


def test_refuses_existing_output_and_gptq_without_calibration(
    tiny_glm: TinyGLM, tmp_path: Path
) -> None:
    (tmp_path / "taken").mkdir()
    with pytest.raises(ConversionError, match="already exists"):
        convert(tiny_glm.path, tmp_path / "taken", ConvertOptions(method="rtn"))
    with pytest.raises(ConversionError, match="needs --calib"):
        convert(tiny_glm.path, tmp_path / "new", ConvertOptions(method="gptq"))
    assert isinstance(ConversionError("x"), UserError)


def test_inspect_rejects_unfinished_or_foreign_dirs(tmp_path: Path) -> None:
    with pytest.raises(InspectError):
        inspect_model(tmp_path / "missing")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(UserError, match="manifest"):
        inspect_model(tmp_path)


def test_pool_without_calibration_is_uniform(tiny_glm: TinyGLM) -> None:
    from engine.codecs import hotpool
    from engine.quant.checkpoint import CheckpointReader
    from tests.support.glm_fixture import HIDDEN, MOE_INTER

    conv = TensorConverter(
        CheckpointReader(tiny_glm.path), ConvertOptions(method="rtn", pool_gb=POOL_GB), None
    )
    plan = conv.plan_pool()
    per_expert = hotpool.expert_fp4_bytes(MOE_INTER, HIDDEN)
    assert plan["counts_from"] == "uniform"
    assert len(plan["experts"]) == int(POOL_GB * (1 << 30)) // per_expert
    assert plan["coverage"] == pytest.approx(len(plan["experts"]) / (4 * EXPERTS))


def test_fp4_candidates_beyond_the_pool_are_written_and_recorded(
    tiny_glm: TinyGLM, tmp_path: Path
) -> None:

    from engine.codecs import hotpool
    from tests.support.glm_fixture import HIDDEN, MOE_INTER

    dst = tmp_path / "out"
    convert(
        tiny_glm.path, dst, ConvertOptions(method="rtn", pool_gb=POOL_GB, fp4_candidates_gb=POOL_GB)
    )
    pool = json.loads((dst / "config.json").read_text())["quantization_config"]["fp4_pool"]
    per_expert = hotpool.expert_fp4_bytes(MOE_INTER, HIDDEN)
    experts = {tuple(p) for p in pool["experts"]}
    candidates = {tuple(p) for p in pool["candidates"]}
    assert len(candidates) == int(POOL_GB * (1 << 30)) // per_expert > 0
    assert not experts & candidates
    assert (
        pool["candidates_bytes"] == len(candidates) * per_expert <= pool["candidates_budget_bytes"]
    )
    names: set[str] = set()
    for shard in dst.glob("*.safetensors"):
        with safe_open(str(shard), "pt") as f:
            names |= set(f.keys())
    lm = "model.language_model."
    for layer, expert in experts | candidates:  # both have their FP4 copies on disk
        assert f"{lm}layers.{layer}.mlp.experts.{expert}.down_proj.weight_fp4" in names
    fp4 = {n for n in names if n.endswith("down_proj.weight_fp4")}
    assert len(fp4) == len(experts | candidates)


@pytest.mark.parametrize("fallback", ["rtn", "pooled"])
def test_starved_down_proj_uses_the_fallback(
    tiny_glm: TinyGLM, calib_file: Path, fallback: str
) -> None:
    from engine.quant.checkpoint import CheckpointReader

    options = ConvertOptions(
        method="gptq",
        calib=calib_file,
        min_tokens=10_000,
        down_fallback=fallback,  # type: ignore[arg-type]
    )
    conv = TensorConverter(CheckpointReader(tiny_glm.path), options, CalibrationFile(calib_file))
    name = tiny_glm.expert_name(2, 1, "down_proj")
    tensors, stats = conv.convert_expert(name, 2, 1, "down_proj", pooled=False)
    assert stats["hessian"] == fallback
    assert stats["method"] == ("rtn" if fallback == "rtn" else "gptq")
    assert "out_err" in stats or fallback == "rtn"
    w2.W2Tensor.from_state_dict(tensors, name)  # a complete W2 tensor either way


def test_calibration_of_the_wrong_width_is_refused(tiny_glm: TinyGLM, tmp_path: Path) -> None:
    from engine.quant.calib import CalibrationError, save_calibration

    calib = tmp_path / "narrow.safetensors"
    save_calibration(calib, {1: torch.randn(8, 64)})
    dst = tmp_path / "out"
    with pytest.raises(CalibrationError, match="hidden size 64"):
        convert(tiny_glm.path, dst, ConvertOptions(method="gptq", calib=calib))
    assert not staging_dir(dst).exists()
