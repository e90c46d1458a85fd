"""The W8A8 int8 copy of a dense model (cpu-coder on a CPU with VNNI): what it writes,
what it refuses, and how a derived builtin is installed from its verified base."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from engine import models
from engine.errors import EngineStateError
from engine.paths import Paths
from engine.staging import DiskSpaceError
from engine.w8a8 import LINEARS, QUANT_CONFIG, write_w8a8
from tests.support.tiny_models import build_tiny_llama


@pytest.fixture(scope="module")
def dense(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = build_tiny_llama(tmp_path_factory.mktemp("dense") / "tiny")
    (model / "LICENSE").write_text("the base's license\n")
    (model / "sparkcode-source.json").write_text('{"sha256": "abc"}')
    return model


def test_the_linears_become_int8_with_a_scale_per_channel_and_the_rest_is_kept(
    dense: Path, tmp_path: Path
) -> None:
    said: list[str] = []
    error = write_w8a8(dense, tmp_path / "int8", said.append)
    before = load_file(str(dense / "model.safetensors"))
    after = load_file(str(tmp_path / "int8" / "model.safetensors"))
    linears = [n for n in before if n.split(".")[-2] in LINEARS]
    assert len(linears) == 2 * 7  # two layers of q, k, v, o, gate, up, down
    for name, weight in before.items():
        if name in linears:
            q, scale = after[name], after[name.removesuffix("weight") + "weight_scale"]
            assert q.dtype == torch.int8 and scale.shape == (weight.shape[0], 1)
            assert int(q.abs().amax(dim=1).min()) == 127  # each channel uses the full range
            assert (
                float((q.float() * scale - weight.float()).abs().max())
                <= float(scale.max()) / 2 + 1e-6
            )  # rounded to the nearest step
        else:
            assert torch.equal(after[name], weight)  # embeddings and norms as they were
    assert len(after) == len(before) + len(linears)
    assert 0 < error < 0.02, error
    config = json.loads((tmp_path / "int8" / "config.json").read_text())
    assert config["quantization_config"] == QUANT_CONFIG
    assert config["hidden_size"] == 128
    assert (tmp_path / "int8" / "tokenizer.json").is_file()
    assert (tmp_path / "int8" / "LICENSE").read_text() == "the base's license\n"
    source = json.loads((tmp_path / "int8" / "sparkcode-source.json").read_text())
    assert source["w8a8_of"] == "tiny" and source["base_source"] == {"sha256": "abc"}
    assert source["linears"] == 14 and source["relative_weight_error"] == round(error, 6)
    assert said[-1].startswith("W8A8 copy done: 14 linears, relative weight error 0.0")
    assert [p.name for p in tmp_path.iterdir()] == ["int8"]  # no staging left


def test_what_cannot_be_quantized_is_named_and_nothing_is_left(dense: Path, tmp_path: Path) -> None:
    with pytest.raises(EngineStateError, match=r"missing has no model.safetensors"):
        write_w8a8(tmp_path / "missing", tmp_path / "out")
    write_w8a8(dense, tmp_path / "int8")
    with pytest.raises(EngineStateError, match=r"int8 is already quantized"):
        write_w8a8(tmp_path / "int8", tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["int8"]
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    (broken / "model.safetensors").write_bytes(b"\xff" * 1000)  # a truncated download
    with pytest.raises(
        EngineStateError,
        match=r"broken/model.safetensors is not a readable "
        r"safetensors file \(.*\); delete .*broken and run `sparkcode models "
        r"fetch broken` again",
    ):
        write_w8a8(broken, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken", "int8"]


def test_an_interrupted_build_keeps_the_installed_copy(
    dense: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "int8"
    write_w8a8(dense, target)
    good = (target / "model.safetensors").read_bytes()

    def disk_full(*_a: object, **_k: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("safetensors.torch.save_file", disk_full)
    with pytest.raises(
        DiskSpaceError,
        match=rf"the disk holding {tmp_path} filled up while writing int8 \(No space left "
        r"on device\); the partial copy was removed",
    ):
        write_w8a8(dense, target)
    assert (target / "model.safetensors").read_bytes() == good
    assert [p.name for p in tmp_path.iterdir()] == ["int8"]


def test_a_copy_the_disk_cannot_hold_is_refused_before_writing(
    dense: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "int8"
    real = shutil.disk_usage(tmp_path)
    monkeypatch.setattr("engine.staging.shutil.disk_usage", lambda _p: real._replace(free=10 << 20))
    with pytest.raises(
        DiskSpaceError,
        match=rf"not enough disk space in {tmp_path} for the W8A8 copy of tiny: it needs "
        r"about 0\.1 GiB and 0\.0 GiB are free; free some space there, or set SPARKCODE_HOME",
    ):
        write_w8a8(dense, target)
    assert list(tmp_path.iterdir()) == []


def test_a_derived_builtin_is_built_once_from_its_installed_base(
    dense: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``models fetch`` of the copy installs its base (verified by hash) first; here the
    base is already installed, so nothing is fetched."""

    paths = Paths(tmp_path / "c", tmp_path / "d", tmp_path / "s")
    shutil.copytree(dense, paths.models_dir / "base")
    base = models.Builtin("base", "a dense model")
    copy = models.Builtin("base-w8a8", "its int8 copy", w8a8_of="base")
    monkeypatch.setitem(models.BUILTINS, "base", base)
    assert not models.is_installed(copy, paths)
    said: list[str] = []
    target = models.install_builtin(copy, paths, said.append)
    assert target == paths.models_dir / "base-w8a8" and models.is_installed(copy, paths)
    assert any("writing a W8A8 int8 copy of base" in line for line in said)
    stamp = (target / "model.safetensors").stat().st_mtime_ns
    assert models.install_builtin(copy, paths) == target
    assert (target / "model.safetensors").stat().st_mtime_ns == stamp  # not rebuilt


def test_the_shipped_copy_is_of_the_verified_coder() -> None:
    copy = models.BUILTINS["qwen2.5-coder-1.5b-instruct-w8a8"]
    assert copy.split is None and copy.w8a8_of == "qwen2.5-coder-1.5b-instruct"
    assert models.BUILTINS[copy.w8a8_of].split is not None  # fetched, checked by sha256
