"""``sparkcode quantize SRC DST`` and ``sparkcode quantize inspect DST`` through main()."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from sparkcode.cli import main
from tests.support.glm_fixture import TinyGLM


def _run(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["sparkcode", *argv])
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_convert_is_the_default_subcommand(
    tiny_glm: TinyGLM,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    dst = tmp_path / "out"
    code, out, err = _run(
        ["quantize", str(tiny_glm.path), str(dst), "--method", "rtn", "--pool-gb", "0"],
        monkeypatch,
        capsys,
    )
    assert code == 0, err
    assert "wrote" in out and (dst / "config.json").is_file()
    assert "all 3 shards" in out + err  # the overall progress bar
    code, out, err = _run(["quantize", "inspect", str(dst), "--json"], monkeypatch, capsys)
    assert code == 0, err
    report = json.loads(out)
    assert report["method"] == "rtn"
    assert [row["layer"] for row in report["layers"] if row["w2_tensors"]] == [1, 2, 3, 4]


def test_inspect_prints_a_table(
    rtn_out: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(["quantize", "inspect", str(rtn_out)], monkeypatch, capsys)
    assert code == 0
    assert "rel_fro" in out and "out_err" in out and "fp4 pool" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["quantize", "/does/not/exist", "{tmp}/o", "--method", "rtn"], "is not a directory"),
        (["quantize", "{src}", "{tmp}/o", "--method", "awq"], "--method must be gptq or rtn"),
        (["quantize", "{src}", "{tmp}/o"], "needs --calib"),
        (["quantize", "inspect", "{tmp}"], "config.json"),
    ],
)
def test_bad_input_is_one_error_line(
    argv: list[str],
    message: str,
    tiny_glm: TinyGLM,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = [a.format(tmp=tmp_path, src=tiny_glm.path) for a in argv]
    code, _out, err = _run(args, monkeypatch, capsys)
    assert code == 1
    assert err.startswith("error: ") and message in err
    assert "Traceback" not in err
