"""prepare_model: what is checked about a profile's model directory before launch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.errors import EngineStateError
from engine.models import prepare_model
from engine.paths import Paths
from engine.profiles import Profile, load_profile
from tests.support.tiny_models import write_profile


def setup(tmp_path: Path, config: str, plugin: str = "") -> tuple[Profile, Paths]:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(config, encoding="utf-8")
    home = tmp_path / "home"
    write_profile(home / "config", "p", model, 8400, extra=plugin)
    paths = Paths(home / "config", home / "data", home / "state")
    return load_profile("p", paths), paths


W2_CONFIG = json.dumps({"quantization_config": {"quant_method": "sparkcode_w2"}})


def test_a_sparkcode_checkpoint_needs_the_w2_quant_feature(tmp_path: Path) -> None:
    profile, paths = setup(tmp_path, W2_CONFIG)
    with pytest.raises(EngineStateError, match=r"sparkcode_w2 checkpoint; profile p must enable"):
        prepare_model(profile, paths)


def test_with_the_feature_it_is_accepted(tmp_path: Path) -> None:
    plugin = '[plugin]\nenabled = true\nfeatures = ["w2_quant"]\n'
    profile, paths = setup(tmp_path, W2_CONFIG, plugin)
    assert prepare_model(profile, paths) == tmp_path / "model"


def test_other_checkpoints_need_nothing(tmp_path: Path) -> None:
    profile, paths = setup(tmp_path, json.dumps({"quantization_config": {"quant_method": "fp8"}}))
    assert prepare_model(profile, paths) == tmp_path / "model"


def test_an_unreadable_config_is_named(tmp_path: Path) -> None:
    profile, paths = setup(tmp_path, "{not json")
    with pytest.raises(EngineStateError, match="config.json is not readable JSON"):
        prepare_model(profile, paths)
