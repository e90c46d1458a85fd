"""``sparkcode detect``: exit codes, standard input, files, errors, JSON."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from sparkcode.cli import main

LOOP = "Let me look at the file. " + "ization" * 12 + "\n"
CLEAN = "The function reads the file and returns its lines.\n"


def run_cli(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    stdin: bytes = b"",
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["sparkcode", "detect", *args])
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"))
    with pytest.raises(SystemExit) as exc:
        main()
    out, err = capsys.readouterr()
    code = exc.value.code
    return (code if isinstance(code, int) else 0), out, err


def test_degenerate_file_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "turn.txt"
    path.write_text(LOOP, encoding="utf-8")
    code, out, _ = run_cli(monkeypatch, capsys, [str(path)])
    assert code == 1
    assert out.startswith("degenerate: subword_repeat")
    assert "'ization' repeated 8 times" in out
    assert "line 1, column 26" in out  # the loop starts right after the lead sentence


def test_clean_file_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "turn.txt"
    path.write_text(CLEAN, encoding="utf-8")
    code, out, _ = run_cli(monkeypatch, capsys, [str(path)])
    assert code == 0
    assert out.startswith("ok: no degeneration")


@pytest.mark.parametrize("args", [[], ["-"]])
def test_reads_stdin(
    args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(monkeypatch, capsys, args, LOOP.encode())
    assert code == 1 and "subword_repeat" in out
    code, out, _ = run_cli(monkeypatch, capsys, args, CLEAN.encode())
    assert code == 0 and out.startswith("ok:")


def test_json_output(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(monkeypatch, capsys, ["--json"], ("x" * 40).encode())
    payload = json.loads(out)
    assert code == 1
    assert payload["degenerate"] is True and payload["pattern"] == "char_run"
    assert payload["position"] == 32 and payload["start"] == 0
    assert payload["input"] == "<stdin>" and payload["line"] == 1
    assert payload["decoded_with_replacement"] is False


def test_missing_file_is_one_error_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.txt"
    code, out, err = run_cli(monkeypatch, capsys, [str(missing)])
    assert code == 2
    assert out == ""
    assert err == f"error: cannot read {missing}: no such file\n"


def test_directory_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(monkeypatch, capsys, [str(tmp_path)])
    assert code == 2
    assert err.startswith("error: cannot read") and "directory" in err


def test_binary_input_is_decoded_with_replacement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "blob.bin"
    path.write_bytes(b"header \xff\xfe ok\n")
    code, out, err = run_cli(monkeypatch, capsys, [str(path)])
    assert code == 0
    assert "not valid UTF-8" in err and "2 undecodable byte(s)" in err
    code, out, _ = run_cli(monkeypatch, capsys, [str(path), "--json"])
    payload = json.loads(out)
    assert payload["decoded_with_replacement"] is True and payload["replaced_bytes"] == 2


def test_garbage_binary_is_degenerate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "blob.bin"
    path.write_bytes(bytes(range(128, 256)) * 4)
    code, out, err = run_cli(monkeypatch, capsys, [str(path)])
    assert code == 1
    assert "not valid UTF-8" in err


@pytest.mark.slow
def test_console_script_pipe() -> None:
    """The real entry point in a pipe: what users do with other tools' output."""
    proc = subprocess.run(
        [sys.executable, "-m", "sparkcode", "detect"],
        input=LOOP.encode(),
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert b"subword_repeat" in proc.stdout
