"""Shared fixtures: one tiny GLM checkpoint, its calibration file and conversions.

The checkpoint and the conversions are built once per session and treated as
read-only; tests that need a damaged checkpoint copy it first. Torch runs on one
thread here: on a small, shared CPU box OpenMP spinning makes the many small
ops of the codecs many times slower with two threads than with one.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from engine.quant.calib import save_calibration
from engine.quant.pipeline import ConvertOptions, convert
from tests.support.glm_fixture import TinyGLM, build_tiny_glm, calibration_inputs

#: Budget (GiB) for three tiny experts' FP4 copies, so the pool is exercised but partial.
POOL_GB = 0.0002


@contextmanager
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(autouse=True, scope="module")
def _single_thread() -> Iterator[None]:
    with one_thread():
        yield


@pytest.fixture(scope="session")
def tiny_glm(tmp_path_factory: pytest.TempPathFactory) -> TinyGLM:
    with one_thread():
        return build_tiny_glm(tmp_path_factory.mktemp("glm") / "src")


@pytest.fixture(scope="session")
def calib_file(tiny_glm: TinyGLM, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("calib") / "calib.safetensors"
    save_calibration(path, calibration_inputs(tiny_glm), source="tiny GLM fixture")
    return path


def rtn_options(calib: Path | None) -> ConvertOptions:
    return ConvertOptions(method="rtn", calib=calib, pool_gb=POOL_GB)


@pytest.fixture(scope="session")
def rtn_out(tiny_glm: TinyGLM, calib_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = tmp_path_factory.mktemp("out") / "rtn"
    with one_thread():
        convert(tiny_glm.path, dst, rtn_options(calib_file))
    return dst


@pytest.fixture(scope="session")
def gptq_out(tiny_glm: TinyGLM, calib_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = tmp_path_factory.mktemp("out") / "gptq"
    with one_thread():
        convert(
            tiny_glm.path, dst, ConvertOptions(method="gptq", calib=calib_file, pool_gb=POOL_GB)
        )
    return dst


@pytest.fixture
def src_copy(tiny_glm: TinyGLM, tmp_path: Path) -> Path:
    """A private copy of the checkpoint that a test may damage."""
    dst = tmp_path / "src"
    shutil.copytree(tiny_glm.path, dst)
    return dst
