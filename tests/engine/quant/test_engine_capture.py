"""The capture feature's file protocol on a plain module, the corpus and the capture profile.

The same hooks inside a real vLLM engine are exercised by tests/e2e/test_calib_engine.py.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import cast

import pytest
import torch

from engine.plugin import calib_capture as cc
from engine.quant.calib import CalibrationError, CalibrationFile
from engine.quant.engine_capture import (
    MIN_CHUNK_TOKENS,
    capture_profile,
    corpus_files,
    stdlib_files,
    token_chunks,
)


class Block(torch.nn.Module):
    def __init__(self, moe: bool) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        if moe:
            self.experts = torch.nn.ModuleList([torch.nn.Linear(8, 8)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x + self.proj(x)
        return out


class Layer(torch.nn.Module):
    def __init__(self, moe: bool) -> None:
        super().__init__()
        self.mlp = Block(moe)


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([Layer(False), Layer(True), Layer(True)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = cast(Layer, layer).mlp(x)
        return x


def test_only_armed_passes_are_recorded_and_flush_writes_the_file(tmp_path: Path) -> None:
    model = Model()
    capture = cc.EngineCapture(tmp_path, max_tokens=10, moe_only=True)
    assert capture.attach(model) == 2
    assert json.loads((tmp_path / cc.HOOKS_FILE).read_text())["hooks"] == 2
    model(torch.randn(5, 8))  # warm-up before arming: not recorded
    (tmp_path / cc.ARM_FILE).touch()
    first = torch.randn(4, 8)
    model(first)
    model(torch.randn(9, 8))  # capped at 10 rows per layer
    (tmp_path / cc.FLUSH_FILE).touch()
    model(torch.randn(1, 8))  # the trigger: writes, not recorded
    assert json.loads((tmp_path / cc.RESULT_FILE).read_text()) == {"layers": {"1": 10, "2": 10}}
    calib = CalibrationFile(tmp_path / cc.CALIB_FILE)
    assert calib.layers == [1, 2]
    x = calib.inputs(1)
    assert x is not None
    with torch.no_grad():
        want = cast(Layer, model.layers[0]).mlp(first)  # layer 1's block reads layer 0's output
    torch.testing.assert_close(x[:4].float(), want.to(torch.bfloat16).float())
    assert not model._forward_pre_hooks and not cast(Layer, model.layers[1]).mlp._forward_pre_hooks
    model(torch.randn(3, 8))  # nothing left to record or write


def test_a_save_failure_is_reported_to_the_driver(tmp_path: Path) -> None:
    model = Model()
    capture = cc.EngineCapture(tmp_path, max_tokens=10, moe_only=True)
    capture.attach(model)
    (tmp_path / cc.ARM_FILE).touch()
    (tmp_path / cc.FLUSH_FILE).touch()  # flushed before any prompt: nothing captured
    model(torch.randn(2, 8))
    assert "no activations to save" in json.loads((tmp_path / cc.RESULT_FILE).read_text())["error"]


def test_every_mlp_is_hooked_for_dense_models(tmp_path: Path) -> None:
    assert cc.EngineCapture(tmp_path, 4, moe_only=False).attach(Model()) == 3


class Tok:
    """Whitespace 'tokenizer': one id per word."""

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [len(w) for w in text.split()]}


def test_token_chunks_fill_the_budget_file_by_file(tmp_path: Path) -> None:
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("x " * 100)
    b.write_text("y " * 50)
    chunks = token_chunks(Tok(), [a, b], budget=120, chunk=40)
    assert sum(len(c) for c in chunks) <= 120
    assert [len(c) for c in chunks] == [40, 40, 40]  # a: 40, 40, (20 dropped: < 32), b: 40
    with pytest.raises(CalibrationError, match="at least"):
        token_chunks(Tok(), [a], budget=100, chunk=MIN_CHUNK_TOKENS - 1)


def test_corpus_interleaves_the_users_code_with_the_stdlib(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("def f(): pass\n")
    (tmp_path / "notes.bin").write_bytes(b"\0\1")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "hook.py").write_text("x = 1\n")
    files = corpus_files(tmp_path)
    std = stdlib_files()
    assert files[:3] == [tmp_path / "pkg" / "mod.py", std[0], std[1]]
    assert len(files) == len(std) + 1
    (tmp_path / "empty").mkdir()
    with pytest.raises(CalibrationError, match="no code files"):
        corpus_files(tmp_path / "empty")
    with pytest.raises(CalibrationError, match="not a directory"):
        corpus_files(tmp_path / "missing")


def test_capture_profile_serves_the_round_eager_with_the_feature(tmp_path: Path) -> None:
    from engine.paths import Paths
    from engine.profiles import load_profile

    model = tmp_path / "round0"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps({"quantization_config": {"quant_method": "sparkcode_w2"}})
    )
    base = load_profile("glm53-flash-spark", Paths(tmp_path, tmp_path, tmp_path))
    prof = capture_profile(base, model, tmp_path / "cap", 4096, 2048)
    assert prof.enforce_eager and prof.speculative is None and prof.enable_prefix_caching is False
    assert prof.model_path == str(model) and prof.quantization == "sparkcode_w2"
    assert "w2_quant" in base.plugin_features  # kept; the capture feature comes last
    assert prof.plugin_features == (*base.plugin_features, "calib_capture")
    assert prof.env["SPARKCODE_CAPTURE_DIR"] == str(tmp_path / "cap")
    assert prof.env["SPARKCODE_CAPTURE_TOKENS"] == "4096"
    assert prof.max_model_len == 2048 + 16
    dense = capture_profile(
        replace(base, plugin_features=("scheduler_fix",)),
        tmp_path,
        tmp_path / "cap",
        64,
        256,
        capture_all=True,
    )
    assert dense.quantization is None  # tmp_path/config.json: not a sparkcode checkpoint
    assert dense.plugin_features == ("scheduler_fix", "calib_capture")
    assert dense.env["SPARKCODE_CAPTURE_ALL"] == "1"
